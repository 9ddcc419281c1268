// Package sshdtest starts a real OpenSSH sshd on 127.0.0.1 for tests, with a
// throwaway host key and user key, so SSH code (host-key checks, remote
// commands, Docker over SSH) is tested against the real server, not a double.
//
// Test kit: production code must not import it.
package sshdtest
