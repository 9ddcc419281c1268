package sshdtest

import "testing"

// Stop leaves no socket listening on the server's port (what "unreachable"
// tests rely on), and listening sees the running server's socket.
func TestStopLeavesThePortClosed(t *testing.T) {
	for i := 0; i < 5; i++ {
		s := Start(t)
		if !listening(s.Port) {
			t.Fatalf("listening(%d) = false while sshd (pid %d) listens there", s.Port, s.PID())
		}
		s.Stop()
		if listening(s.Port) {
			t.Fatalf("listening(%d) = true after Stop", s.Port)
		}
	}
}
