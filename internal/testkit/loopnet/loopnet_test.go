package loopnet

import (
	"bufio"
	"net"
	"testing"
	"time"
)

func TestServeHandlesEachConnection(t *testing.T) {
	l := Listen(t)
	Serve(l, func(c net.Conn) {
		line, _ := bufio.NewReader(c).ReadString('\n')
		_, _ = c.Write([]byte("got " + line))
	})
	for _, msg := range []string{"a\n", "b\n"} {
		c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = c.Write([]byte(msg))
		got, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || got != "got "+msg {
			t.Fatalf("answer to %q = %q, %v", msg, got, err)
		}
	}
}

func TestClosedAddrRefuses(t *testing.T) {
	addr := ClosedAddr(t)
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("dial %s succeeded; want nothing listening", addr)
	}
}
