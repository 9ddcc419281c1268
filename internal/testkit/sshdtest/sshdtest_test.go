package sshdtest

import (
	"testing"

	"github.com/sparklane/sparklane/internal/engine/serve"
)

// Stop leaves no socket listening on the server's port (what "unreachable"
// tests rely on), and serve.Listening sees the running server's socket.
func TestStopLeavesThePortClosed(t *testing.T) {
	for i := 0; i < 5; i++ {
		s := Start(t)
		if !serve.Listening(s.Port) {
			t.Fatalf("serve.Listening(%d) = false while sshd (pid %d) listens there", s.Port, s.PID())
		}
		s.Stop()
		if serve.Listening(s.Port) {
			t.Fatalf("serve.Listening(%d) = true after Stop", s.Port)
		}
	}
}
