// Package pagecache reads how much of a file the kernel holds in its page
// cache (mincore), for the tests that prove a copy or download drops its
// pages behind it.
//
// Test kit: production code must not import it; it imports nothing of
// sparklane.
package pagecache
