package loopnet

import (
	"net"
	"testing"
)

// Listen returns a TCP listener on 127.0.0.1 at a free port; it is closed
// when the test ends.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Serve accepts connections on l until it is closed, each handled by handle
// in its own goroutine and closed when handle returns. It returns at once.
func Serve(l net.Listener, handle func(net.Conn)) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}

// ClosedAddr returns a loopback address (HOST:PORT) on which nothing
// listens: its listener was closed before it returns.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	return closed(t).String()
}

// FreePort returns a loopback TCP port that was free a moment ago: the
// port of a ClosedAddr.
func FreePort(t testing.TB) int {
	t.Helper()
	return closed(t).Port
}

// closed listens on a free loopback port and closes the listener.
func closed(t testing.TB) *net.TCPAddr {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr)
}
