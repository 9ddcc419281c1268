package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// On a terminal, init shows an unknown host's key fingerprint and adds it
// to known_hosts only when the operator answers yes; "no" writes nothing.
// (The prompt reads App.In; askHostKeys stands in for the terminal.)
func TestInitConfirmsUnknownHostKey(t *testing.T) {
	s := sshdtest.Start(t)
	dir := t.TempDir()
	kh := filepath.Join(dir, "known_hosts")
	out := filepath.Join(dir, "sparklane.toml")
	args := []string{"init", "--node", "dgx1=" + s.User + "@127.0.0.1:" + strconv.Itoa(s.Port), "--known-hosts", kh, "--identity", s.IdentityFile, "--out", out}
	run := func(answer string, ask bool) (error, string, string) {
		var o, e bytes.Buffer
		a := &App{Out: &o, Err: &e, In: strings.NewReader(answer), askHostKeys: ask}
		err := a.execute(context.Background(), args)
		return err, o.String(), e.String()
	}
	fp := ssh.FingerprintSHA256(s.HostKey)

	err, o, e := run("no\n", true)
	if err == nil || !strings.Contains(e, fp) || !strings.Contains(err.Error(), "not trusted") {
		t.Fatalf("answer no: err %v\n%s%s", err, o, e)
	}
	if b, _ := os.ReadFile(kh); len(b) != 0 {
		t.Fatalf("known_hosts written after 'no': %s", b)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatal("config written after 'no'")
	}

	err, o, e = run("yes\n", true)
	if err != nil || !strings.Contains(e, "added "+s.HostKey.Type()+" "+fp) || !strings.Contains(o, "wrote "+out) {
		t.Fatalf("answer yes: err %v\n%s%s", err, o, e)
	}
	// Now known: no prompt needed (a non-terminal run succeeds).
	err, o, e = run("", false)
	if err != nil || !strings.Contains(o, "is up to date") || strings.Contains(e, "Trust it") {
		t.Fatalf("after trusting: err %v\n%s%s", err, o, e)
	}
}
