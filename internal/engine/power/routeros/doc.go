// Package routeros speaks the MikroTik RouterOS API (TCP 8728): the
// length-prefixed word/sentence encoding, login (plain since 6.43, and the
// older MD5 challenge), and one command at a time. power uses it for the
// graceful shutdown of MikroTik switches (/system/shutdown) before cutting
// their outlet relay.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package routeros
