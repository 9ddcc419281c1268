// Package fleete2e runs `starter fleet install|status|upgrade|uninstall`
// end to end: the real worker binary, installed over a real loopback sshd,
// polling a real embedded Temporal server of a control service. It is its
// own package so the fleet engine's tests do not link the server.
//
// Test-only: production code must not import it.
package fleete2e
