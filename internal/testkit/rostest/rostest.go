package rostest

import (
	"bufio"
	"crypto/md5"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/power/routeros"
)

// Options shape the double's behaviour.
type Options struct {
	User, Password string
	// Legacy makes /login answer with an MD5 challenge (RouterOS < 6.43).
	Legacy bool
	// DropOnShutdown closes the connection on /system/shutdown without a
	// reply, as a device that powers down mid-answer does.
	DropOnShutdown bool
	// OnShutdown runs when an authenticated /system/shutdown arrives, so a
	// test can mark its simulated device as going down.
	OnShutdown func()
}

// Server is a running double.
type Server struct {
	// Addr is host:port on 127.0.0.1.
	Addr string
	opt  Options
	ln   net.Listener

	mu       sync.Mutex
	commands []string
	logins   int
	failed   int
}

// Start listens on 127.0.0.1 and serves until the test ends.
func Start(t testing.TB, opt Options) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("rostest: listen on 127.0.0.1: %v", err)
	}
	s := &Server{Addr: ln.Addr().String(), opt: opt, ln: ln}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); s.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return s
}

// Commands returns the authenticated commands received, in order.
func (s *Server) Commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.commands...)
}

// Logins returns how many logins succeeded and failed.
func (s *Server) Logins() (ok, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logins, s.failed
}

func (s *Server) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	authed := false
	var challenge []byte
	send := func(words ...string) bool {
		_, err := c.Write(routeros.EncodeSentence(words...))
		return err == nil
	}
	for {
		words, err := routeros.ReadSentence(r)
		if err != nil || len(words) == 0 {
			return
		}
		attrs := map[string]string{}
		for _, w := range words[1:] {
			if rest, ok := strings.CutPrefix(w, "="); ok {
				k, v, _ := strings.Cut(rest, "=")
				attrs[k] = v
			}
		}
		cmd := words[0]
		if cmd == "/login" {
			ok := false
			switch {
			case s.opt.Legacy && attrs["response"] == "":
				challenge = []byte("0123456789abcdef")
				if !send("!done", "=ret="+hex.EncodeToString(challenge)) {
					return
				}
				continue
			case s.opt.Legacy:
				h := md5.New()
				h.Write([]byte{0})
				h.Write([]byte(s.opt.Password))
				h.Write(challenge)
				ok = attrs["name"] == s.opt.User && attrs["response"] == "00"+hex.EncodeToString(h.Sum(nil))
			default:
				ok = attrs["name"] == s.opt.User && attrs["password"] == s.opt.Password
			}
			s.mu.Lock()
			if ok {
				s.logins++
			} else {
				s.failed++
			}
			s.mu.Unlock()
			if !ok {
				send("!trap", "=message=invalid user name or password (6)")
				send("!done")
				continue
			}
			authed = true
			if !send("!done") {
				return
			}
			continue
		}
		if !authed {
			send("!fatal", "not logged in")
			return
		}
		s.mu.Lock()
		s.commands = append(s.commands, cmd)
		s.mu.Unlock()
		switch cmd {
		case "/system/shutdown":
			if s.opt.OnShutdown != nil {
				s.opt.OnShutdown()
			}
			if s.opt.DropOnShutdown {
				return
			}
			send("!done")
			return
		case "/system/identity/print":
			send("!re", "=name=rostest-double")
			send("!done")
		case "/quit":
			send("!fatal", "session terminated on request")
			return
		default:
			send("!trap", "=message=no such command prefix")
			send("!done")
		}
	}
}
