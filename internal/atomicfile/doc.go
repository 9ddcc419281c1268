// Package atomicfile writes a file so a crash leaves either the old or the
// new one: a temp name beside it, fsynced, renamed into place, the
// directory fsynced. Every writer of state files (ledgers, reports, the
// starter's config, the control service's records) uses it; it imports
// nothing of the project.
package atomicfile
