package pgtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"

	"github.com/sparklane/sparklane/internal/devserver/searchattr"
	"github.com/sparklane/sparklane/internal/pki"
	"github.com/sparklane/sparklane/internal/tclient"
)

// A Temporal server on a real PostgreSQL, its frontend behind mutual TLS:
// a client with a certificate from the CA reaches the namespace and finds
// sparklane's search attributes; one without a certificate is refused.
func TestTemporalOnPostgresWithMTLS(t *testing.T) {
	ca, err := pki.LoadOrCreateCA(filepath.Join(t.TempDir(), "pki"), "pgtest CA")
	if err != nil {
		t.Fatal(err)
	}
	srvID, err := ca.Server("frontend", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.Client("control")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pg := Start(t, Options{})
	t.Logf("PostgreSQL up on %s in %v", pg.Addr(), time.Since(start))
	start = time.Now()
	s := StartTemporal(t, pg, TemporalOptions{TLS: &TLS{CA: ca.File, ServerCert: srvID.Cert, ServerKey: srvID.Key, ClientCert: cli.Cert, ClientKey: cli.Key}})
	t.Logf("Temporal up on %s in %v", s.Address, time.Since(start))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := tclient.Dial(ctx, tclient.DialOptions{Address: s.Address, Namespace: s.Namespace, TLSCA: ca.File, TLSCert: cli.Cert, TLSKey: cli.Key})
	if err != nil {
		t.Fatalf("dial with the client certificate: %v", err)
	}
	defer c.Close()
	sa, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: s.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	for name := range searchattr.Definitions() {
		if _, ok := sa.GetCustomAttributes()[name]; !ok {
			t.Errorf("search attribute %s not registered: %v", name, sa.GetCustomAttributes())
		}
	}
	if _, err := tclient.Dial(ctx, tclient.DialOptions{Address: s.Address, Namespace: s.Namespace, TLSCA: ca.File, Timeout: 3 * time.Second}); err == nil {
		t.Fatal("a client without a certificate reached the frontend")
	} else if !strings.Contains(err.Error(), s.Address) {
		t.Errorf("refusal does not name the frontend: %v", err)
	}
}

// A test process killed before its cleanup leaves a running postmaster
// and its directory; the next Start stops that server and removes both.
func TestStartReclaimsWhatAKilledTestLeft(t *testing.T) {
	if os.Getenv("PGTEST_HELPER") == "1" {
		pg := Start(t, Options{})
		fmt.Println("DIR", pg.Dir)
		select {} // killed by the parent
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStartReclaimsWhatAKilledTestLeft$", "-test.v")
	cmd.Env = append(os.Environ(), "PGTEST_HELPER=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	dir := ""
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "DIR "); ok {
			dir = d
			break
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if dir == "" {
		t.Fatal("the helper test never started its server")
	}
	pidFile := filepath.Join(dir, "data", "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the killed test's server: %v", err)
	}
	postmaster, _ := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if postmaster <= 0 || !running(postmaster) {
		t.Fatalf("the killed test's postmaster %d is not running", postmaster)
	}
	Start(t, Options{})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left by the killed test is still there (%v)", dir, err)
	}
	// pg_ctl stop -w returns once the postmaster removed its pid file;
	// the process may take a moment more to exit.
	deadline := time.Now().Add(10 * time.Second)
	for running(postmaster) {
		if time.Now().After(deadline) {
			t.Fatalf("the killed test's postmaster %d still runs", postmaster)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// running reports whether pid is a live process (not gone, not a zombie
// waiting for a parent to reap it).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
