package itest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/pki"
)

// The mTLS overlay merges with the production compose file, keeps every
// image pinned, requires client certificates on the frontend, gives the UI
// and the setup job client identities, and publishes the fleet port only
// behind it; `starter control certs` issues the files it names, and they
// make a working mutual-TLS pair.
func TestComposeMTLSProfile(t *testing.T) {
	base := filepath.Join("..", "..", "..", "docker-compose.temporal.yml")
	overlay := filepath.Join("..", "..", "..", "docker-compose.temporal.mtls.yml")
	var cmd *exec.Cmd
	if exec.Command("docker", "compose", "version").Run() == nil {
		cmd = exec.Command("docker", "compose", "-f", base, "-f", overlay, "config")
	} else {
		cmd = exec.Command("docker-compose", "-f", base, "-f", overlay, "config")
	}
	dir := t.TempDir()
	cmd.Env = append(os.Environ(), "SPARKLANE_PKI="+dir, "SPARKLANE_FLEET_ADDR=10.231.0.1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	text := string(out)
	for _, want := range []string{
		"TEMPORAL_TLS_REQUIRE_CLIENT_AUTH: 'true'", "10.231.0.1:7243:7233", "127.0.0.1:7233:7233",
		"/pki/frontend.pem", "/pki/ui.pem", "/pki/control.pem", dir + ":/pki:ro",
	} {
		if !strings.Contains(text, want) && !strings.Contains(text, strings.ReplaceAll(want, "'", "\"")) {
			t.Errorf("merged compose config lacks %q", want)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "image:") && (strings.HasSuffix(l, ":latest") || !strings.Contains(strings.TrimPrefix(l, "image:"), ":")) {
			t.Errorf("unpinned image in the mTLS profile: %s", l)
		}
	}

	// The files the overlay names, issued by the starter for a 2-node fleet.
	f := newFleet(t, fleetOptions{nodes: 2, clusters: map[string][]string{"duo": {"n1", "n2"}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, stdout, stderr := f.starter(ctx, "--json", "control", "certs", "--dir", dir, "--host", "10.231.0.1")
	if code != 0 {
		t.Fatalf("control certs: exit %d\n%s%s", code, stdout, stderr)
	}
	var res struct {
		CA    string               `json:"ca"`
		Certs map[string]pki.Files `json:"certs"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("control certs --json: %v\n%s", err, stdout)
	}
	for _, name := range []string{"frontend", "control", "ui", "operator", "node-n1", "node-n2"} {
		fl, ok := res.Certs[name]
		if !ok {
			t.Fatalf("no %s certificate issued: %+v", name, res.Certs)
		}
		if _, err := tls.LoadX509KeyPair(fl.Cert, fl.Key); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// The frontend certificate answers for the fleet address and the
	// compose service name, and chains to the CA.
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(res.CA)
	pool.AppendCertsFromPEM(b)
	pair, _ := tls.LoadX509KeyPair(res.Certs["frontend"].Cert, res.Certs["frontend"].Key)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"10.231.0.1", "temporal", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("frontend certificate for %s: %v", name, err)
		}
	}
}

// `starter control install` writes the control service's systemd unit and
// stable copies of the starter and of the worker the unit runs (the
// control service's program), changes nothing the second time, and says so
// clearly on a host without systemd.
func TestControlInstallWritesUnitIdempotently(t *testing.T) {
	worker := buildBinary(t, "worker")
	t.Setenv("SPARKLANE_CONTROL_EXE", worker)
	f := newFleet(t, fleetOptions{nodes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	units, bins := t.TempDir(), t.TempDir()
	code, out, errOut := f.starter(ctx, "control", "install", "--unit-dir", units, "--bin-dir", bins)
	if code != 0 {
		t.Fatalf("control install: exit %d\n%s%s", code, out, errOut)
	}
	unit, err := os.ReadFile(filepath.Join(units, "sparklane-control.service"))
	if err != nil {
		t.Fatal(err)
	}
	want := "ExecStart=" + filepath.Join(bins, "worker") + " dev --config " + f.cfgFile
	if !strings.Contains(string(unit), want) || !strings.Contains(string(unit), "Restart=on-failure") {
		t.Fatalf("unit lacks %q or restart-on-failure:\n%s", want, unit)
	}
	for _, name := range []string{"starter", "worker"} {
		if st, err := os.Stat(filepath.Join(bins, name)); err != nil || st.Mode().Perm()&0o100 == 0 {
			t.Fatalf("program copy %s: %v %v", name, st, err)
		}
	}
	if out, err := exec.Command("cmp", worker, filepath.Join(bins, "worker")).CombinedOutput(); err != nil {
		t.Fatalf("the installed worker is not the control service's program %s: %v\n%s", worker, err, out)
	}
	if _, err := os.Stat("/run/systemd/system"); err != nil && !strings.Contains(out, "does not run systemd") {
		t.Errorf("no systemd here, and install did not say so:\n%s", out)
	}
	code, out, errOut = f.starter(ctx, "control", "install", "--unit-dir", units, "--bin-dir", bins)
	if code != 0 || !strings.Contains(out, "unchanged") {
		t.Fatalf("second install: exit %d, want 'unchanged'\n%s%s", code, out, errOut)
	}
}
