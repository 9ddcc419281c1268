package cli

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/crypto/ssh"

	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// ptyScreen reads what the program writes to a real pseudo-terminal, so a
// test waits for a prompt by its text (never by sleeping).
type ptyScreen struct {
	t     *testing.T
	lines chan string
	seen  strings.Builder
}

func newPTYScreen(t *testing.T, master *os.File) *ptyScreen {
	s := &ptyScreen{t: t, lines: make(chan string, 256)}
	go func() {
		r := bufio.NewReader(master)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				s.lines <- string(buf[:n])
			}
			if err != nil {
				close(s.lines)
				return
			}
		}
	}()
	return s
}

// waitFor reads until want has appeared since the last wait.
func (s *ptyScreen) waitFor(want string) {
	s.t.Helper()
	deadline := time.After(30 * time.Second)
	for !strings.Contains(s.seen.String(), want) {
		select {
		case chunk, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("terminal closed before %q appeared:\n%s", want, s.seen.String())
			}
			s.seen.WriteString(chunk)
		case <-deadline:
			s.t.Fatalf("no %q on the terminal after 30 s:\n%s", want, s.seen.String())
		}
	}
	rest := s.seen.String()[strings.Index(s.seen.String(), want)+len(want):]
	s.seen.Reset()
	s.seen.WriteString(rest)
}

// starter init on a real terminal (a pty) with no --node asks for each
// node's name and SSH target, re-asks a bad answer, shows the unknown host
// key's fingerprint and adds it to known_hosts on "yes", then writes the
// config for the nodes typed in.
func TestInitInteractiveOnARealTerminal(t *testing.T) {
	s := sshdtest.Start(t)
	dir := t.TempDir()
	kh := filepath.Join(dir, "known_hosts") // absent: every key is unknown
	out := filepath.Join(dir, "sparklane.toml")
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pty: %v", err)
	}
	t.Cleanup(func() { master.Close(); tty.Close() })
	screen := newPTYScreen(t, master)
	type result struct {
		code int
		out  string
	}
	done := make(chan result, 1)
	go func() {
		var o strings.Builder
		code := Execute(context.Background(), []string{"init", "--known-hosts", kh, "--identity", s.IdentityFile, "--out", out},
			tty, &o, tty, nil)
		done <- result{code, o.String()}
	}()
	target := s.User + "@127.0.0.1:" + strconv.Itoa(s.Port)
	typeLine := func(l string) {
		if _, err := io.WriteString(master, l+"\r"); err != nil {
			t.Fatal(err)
		}
	}
	screen.waitFor("node 1 name")
	typeLine("dgx1")
	screen.waitFor("SSH target of dgx1")
	typeLine("not a target")
	screen.waitFor("write it as user@host")
	screen.waitFor("SSH target of dgx1")
	typeLine(target)
	screen.waitFor("node 2 name")
	typeLine("dgx1")
	screen.waitFor("already named")
	screen.waitFor("node 2 name")
	typeLine("")
	screen.waitFor(ssh.FingerprintSHA256(s.HostKey))
	screen.waitFor("(yes/no)")
	typeLine("yes")
	screen.waitFor("added " + s.HostKey.Type())
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("init did not end after the answers")
	}
	if r.code != 0 || !strings.Contains(r.out, "wrote "+out) || !strings.Contains(r.out, "dgx1: root ") {
		t.Fatalf("init: exit %d\n%s", r.code, r.out)
	}
	cfg, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(cfg), "name = \"dgx1\"\nssh = \""+target+"\"") {
		t.Fatalf("config (%v):\n%s", err, cfg)
	}
	if b, _ := os.ReadFile(kh); !strings.Contains(string(b), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.HostKey)))) {
		t.Fatalf("known_hosts lacks the confirmed key:\n%s", b)
	}
}

// On a terminal, init asks which of several hub caches on the shared root
// is the fleet's (a bad answer is asked again) and writes the one chosen.
func TestInitAsksWhichHubCacheOnARealTerminal(t *testing.T) {
	s := sshdtest.Start(t)
	dir := t.TempDir()
	nas := t.TempDir()
	for _, d := range []string{"a/huggingface/hub", "b/models--org--n"} {
		if err := os.MkdirAll(filepath.Join(nas, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "sparklane.toml")
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pty: %v", err)
	}
	t.Cleanup(func() { master.Close(); tty.Close() })
	screen := newPTYScreen(t, master)
	done := make(chan int, 1)
	var o strings.Builder
	go func() {
		done <- Execute(context.Background(), []string{"init", "--node", "dgx1=" + s.User + "@127.0.0.1:" + strconv.Itoa(s.Port),
			"--known-hosts", s.KnownHostsFile, "--identity", s.IdentityFile, "--shared-root", nas, "--out", out}, tty, &o, tty, nil)
	}()
	screen.waitFor("2) " + filepath.Join(nas, "b"))
	screen.waitFor("hf_cache_dir (1-2): ")
	if _, err := io.WriteString(master, "3\r"); err != nil {
		t.Fatal(err)
	}
	screen.waitFor("type a number from 1 to 2")
	screen.waitFor("hf_cache_dir (1-2): ")
	if _, err := io.WriteString(master, "2\r"); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("init: exit %d\n%s", code, o.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("init did not end after the answer")
	}
	if cfg, err := os.ReadFile(out); err != nil || !strings.Contains(string(cfg), "hf_cache_dir = \""+filepath.Join(nas, "b")+"\"") {
		t.Fatalf("config (%v):\n%s", err, cfg)
	}
}
