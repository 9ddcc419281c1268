package tclient

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/testkit/loopnet"
)

func TestDialClosedPortFailsFastWithOneLine(t *testing.T) {
	addr := loopnet.ClosedAddr(t)
	start := time.Now()
	c, err := Dial(context.Background(), DialOptions{Address: addr, Namespace: "lab", Timeout: 2 * time.Second})
	took := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatalf("Dial(%s) succeeded with nothing listening", addr)
	}
	msg := err.Error()
	t.Logf("error after %s: %s", took.Round(time.Millisecond), msg)
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans several lines: %q", msg)
	}
	for _, want := range []string{
		"temporal: cannot reach " + addr + " (namespace lab): ",
		"go run ./worker dev", "temporal.address", "docker-compose.temporal.yml",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	// Bounded: the timeout plus slack for a loaded 2-core machine, not the
	// SDK's open-ended retry.
	if took > 10*time.Second {
		t.Errorf("Dial to a closed port took %s, want it bounded by the 2s timeout", took)
	}
}

// A listener that accepts and never answers (a firewall, a wrong service)
// must cost the timeout, not a hang.
func TestDialSilentServerTimesOut(t *testing.T) {
	l := loopnet.Listen(t)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	_, err := Dial(context.Background(), DialOptions{Address: l.Addr().String(), Timeout: time.Second})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "cannot reach "+l.Addr().String()) {
		t.Fatalf("err = %v", err)
	}
	t.Logf("error after %s: %s", took.Round(time.Millisecond), err)
	if !strings.Contains(err.Error(), "no answer within 1s") {
		t.Errorf("want the timeout named as the reason, got %q", err)
	}
	if took > 10*time.Second {
		t.Errorf("Dial to a silent server took %s, want it bounded by the 1s timeout", took)
	}
}

func TestTLSOptionsAreChecked(t *testing.T) {
	dir := t.TempDir()
	_, err := Dial(context.Background(), DialOptions{Address: loopnet.ClosedAddr(t), TLSCert: filepath.Join(dir, "c.pem")})
	if err == nil || !strings.Contains(err.Error(), "temporal.tls_key") {
		t.Errorf("cert without key: %v", err)
	}
	bad := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(bad, []byte("not a cert"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Dial(context.Background(), DialOptions{Address: loopnet.ClosedAddr(t), TLSCA: bad})
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "temporal.tls_ca") {
		t.Errorf("bad CA: %v", err)
	}
	_, err = Dial(context.Background(), DialOptions{Address: loopnet.ClosedAddr(t), TLSCert: filepath.Join(dir, "missing.pem"), TLSKey: filepath.Join(dir, "missing.key")})
	if err == nil || !strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("missing cert file: %v", err)
	}
	conf, err := tlsConfig(DialOptions{APIKey: "k"})
	if err != nil || conf == nil {
		t.Errorf("API key must turn TLS on: conf=%v err=%v", conf, err)
	}
	conf, err = tlsConfig(DialOptions{})
	if err != nil || conf != nil {
		t.Errorf("no TLS options must mean plaintext: conf=%v err=%v", conf, err)
	}
}
