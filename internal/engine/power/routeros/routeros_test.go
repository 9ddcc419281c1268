package routeros_test

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/power/routeros"
	"github.com/sparklane/sparklane/internal/testkit/rostest"
)

// The byte vectors are the ones in MikroTik's API documentation.
func TestLengthEncoding(t *testing.T) {
	cases := []struct {
		n    int
		want []byte
	}{
		{0, []byte{0x00}},
		{0x7f, []byte{0x7f}},
		{0x80, []byte{0x80, 0x80}},
		{0x3fff, []byte{0xbf, 0xff}},
		{0x4000, []byte{0xc0, 0x40, 0x00}},
		{0x1fffff, []byte{0xdf, 0xff, 0xff}},
		{0x200000, []byte{0xe0, 0x20, 0x00, 0x00}},
		{0xfffffff, []byte{0xef, 0xff, 0xff, 0xff}},
		{0x10000000, []byte{0xf0, 0x10, 0x00, 0x00, 0x00}},
	}
	for _, c := range cases {
		got := routeros.EncodeLength(c.n)
		if !bytes.Equal(got, c.want) {
			t.Errorf("EncodeLength(%#x) = % x, want % x", c.n, got, c.want)
		}
		back, err := routeros.ReadLength(bytes.NewReader(got))
		if err != nil || back != c.n {
			t.Errorf("ReadLength(% x) = %#x, %v; want %#x", got, back, err, c.n)
		}
	}
}

func TestSentenceRoundTrip(t *testing.T) {
	long := strings.Repeat("x", 300)
	words := []string{"/system/shutdown", "=a=b", long}
	enc := routeros.EncodeSentence(words...)
	if enc[len(enc)-1] != 0 {
		t.Fatal("sentence must end with a zero-length word")
	}
	got, err := routeros.ReadSentence(bufio.NewReader(bytes.NewReader(enc)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, "|") != strings.Join(words, "|") {
		t.Fatalf("round trip: got %q", got)
	}
}

func dial(t *testing.T, addr string) *routeros.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn := routeros.NewConn(c)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestLoginAndCommand(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		srv := rostest.Start(t, rostest.Options{User: "ops", Password: "pw-5678", Legacy: legacy})
		conn := dial(t, srv.Addr)
		if err := conn.Login("ops", "pw-5678"); err != nil {
			t.Fatalf("legacy=%v: login: %v", legacy, err)
		}
		reps, err := conn.Run("/system/identity/print")
		if err != nil {
			t.Fatal(err)
		}
		if len(reps) != 2 || reps[0].Type != "!re" || reps[0].Attrs["name"] != "rostest-double" || reps[1].Type != "!done" {
			t.Fatalf("identity replies %+v", reps)
		}
		_, err = conn.Run("/nonsense")
		var trap *routeros.TrapError
		if !errors.As(err, &trap) || !strings.Contains(trap.Message, "no such command") {
			t.Fatalf("unknown command: want TrapError, got %v", err)
		}
		if ok, _ := srv.Logins(); ok != 1 {
			t.Fatalf("legacy=%v: logins ok=%d", legacy, ok)
		}
	}
}

func TestLoginRefused(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		srv := rostest.Start(t, rostest.Options{User: "ops", Password: "right", Legacy: legacy})
		conn := dial(t, srv.Addr)
		err := conn.Login("ops", "wrong-pass-1234")
		if !errors.Is(err, routeros.ErrLoginFailed) {
			t.Fatalf("legacy=%v: want ErrLoginFailed, got %v", legacy, err)
		}
		if strings.Contains(err.Error(), "wrong-pass-1234") {
			t.Fatalf("error leaks the password: %v", err)
		}
		if _, failed := srv.Logins(); failed != 1 {
			t.Fatalf("failed logins %d", failed)
		}
	}
}
