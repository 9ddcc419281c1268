package fleete2e

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/fleet"
	"github.com/sparklane/sparklane/internal/pki"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
	"github.com/sparklane/sparklane/internal/testkit/testfleet"
	"github.com/sparklane/sparklane/internal/workers"
)

// The real deployment path on the network-namespace test fleet: two hosts
// with their own IPs, sshd and mount namespaces; the control service on
// this machine holds a reverse SSH tunnel to each, so a node's worker
// reaches the embedded server at the node's own 127.0.0.1:PORT. Install
// (no systemd on the hosts: the supervisor, said so), status, a rolling
// upgrade node by node, uninstall.
func TestFleetOnTestFleetThroughTheTunnel(t *testing.T) {
	tf := testfleet.New(t, testfleet.Options{Name: "flinst", Nodes: 2})
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	port := sshdtest.FreePort(t)
	var nodes strings.Builder
	for _, n := range tf.Nodes() {
		fmt.Fprintf(&nodes, "[[nodes]]\nname = %q\nssh = %q\nknown_hosts = %q\nidentity = %q\naddress = %q\nroots = [\"/mnt/nvme\"]\n\n",
			n.Name, n.SSHAddr(), tf.KnownHostsFile(), tf.IdentityFile(), n.IP)
	}
	cfgFile := filepath.Join(dir, "sparklane.toml")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf("state_dir = %q\nshared_roots = [%q]\n\n[temporal]\nport = %d\nui_port = -1\n\n%s[[clusters]]\nname = \"pair\"\nnodes = [\"h1\", \"h2\"]\n",
		state, testfleet.NASPath, port, nodes.String())), 0o644); err != nil {
		t.Fatal(err)
	}
	done := runControl(t, cfgFile)
	waitControl(t, state, done)

	// Every install path is node-local on these hosts: the install goes
	// to the real default paths (fleet.DefaultLayout).
	l := fleet.DefaultLayout()
	common := []string{"--config", cfgFile, "--json", "fleet"}
	rows := installJSON(t, append(common, "install", "--wait", "120s")...)
	if len(rows) != 2 {
		t.Fatalf("install rows %+v", rows)
	}
	for _, r := range rows {
		if r.Binary != fleet.Uploaded || r.Run != fleet.Started || r.Manager != fleet.ManagerSupervisor || r.Poller == "" || r.Credentials != fleet.Written ||
			len(r.Notices) != 1 || !strings.Contains(r.Notices[0], "does not run systemd") {
			t.Fatalf("install on %s: %+v", r.Node, r)
		}
		t.Logf("install on %s took %v, its worker polled through the tunnel after %v (%s)", r.Node, r.Took, r.PollWait, r.Poller)
	}
	// Each node has its own copy: the files live in its own mount namespace.
	for _, n := range tf.Nodes() {
		out, err := tf.SSH(n, "cat "+l.Config()+"; test -x "+l.Binary()+" && echo BINARY-OK")
		if err != nil || !strings.Contains(string(out), fmt.Sprintf("address = '127.0.0.1:%d'", port)) || !strings.Contains(string(out), "BINARY-OK") {
			t.Fatalf("node %s files: %v\n%s", n.Name, err, out)
		}
		// Its staging relay identity, from the control's CA, key 0600.
		id := fleet.FleetIdentityFiles(l.StateDir, n.Name)
		out, err = tf.SSH(n, "stat -c '%a %n' "+strings.Join(id, " "))
		if want := fmt.Sprintf("600 %s", id[2]); err != nil || !strings.Contains(string(out), want) {
			t.Fatalf("node %s relay identity: %v, want %q\n%s", n.Name, err, want, out)
		}
		pemCert, err := tf.SSH(n, "cat "+id[1])
		blk, _ := pem.Decode(pemCert)
		if err != nil || blk == nil {
			t.Fatalf("node %s relay certificate: %v\n%s", n.Name, err, pemCert)
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err != nil || c.Subject.CommonName != "relay-"+n.Name {
			t.Fatalf("node %s relay certificate: %v, subject %v", n.Name, err, c)
		}
	}

	code, out, errOut := starter(t, append(common, "status")...)
	var st []struct {
		fleet.NodeStatus
		Mismatch bool      `json:"mismatch"`
		LastPoll time.Time `json:"last_poll"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || len(st) != 2 {
		t.Fatalf("status: exit %d (%v)\n%s\n%s", code, err, out, errOut)
	}
	for _, s := range st {
		if s.State != "active" || s.Mismatch || s.LastPoll.IsZero() {
			t.Fatalf("status of %s: %+v", s.Node, s)
		}
	}

	// Rolling upgrade: node by node, each polling again before the next.
	b, err := os.ReadFile(filepath.Join(state, "bin", "worker"))
	if err != nil {
		t.Fatal(err)
	}
	worker2 := filepath.Join(dir, "worker2")
	if err := os.WriteFile(worker2, append(b, []byte("\nsparklane test build 2\n")...), 0o755); err != nil {
		t.Fatal(err)
	}
	rows = installJSON(t, append(common, "--worker-binary", worker2, "upgrade", "--wait", "120s")...)
	for i, r := range rows {
		if r.Node != tf.Nodes()[i].Name || r.Binary != fleet.Uploaded || r.Run != fleet.Restarted || r.Poller == "" {
			t.Fatalf("upgrade row %d: %+v", i, r)
		}
		t.Logf("upgrade of %s took %v, new poller after %v", r.Node, r.Took, r.PollWait)
	}

	code, out, errOut = starter(t, append(common, "uninstall")...)
	if code != 0 || strings.Count(out, `"stopped": true`) != 2 {
		t.Fatalf("uninstall: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, n := range tf.Nodes() {
		// The directories themselves are the test hosts' mount points
		// (node-local), so they stay; nothing install wrote may be left.
		out, _ := tf.SSH(n, "ls -A "+l.LibDir+" "+l.ConfDir+" "+l.RunDir+" | grep -v -e '^/' -e '^$' || true; ls -d "+pki.FleetDir(l.StateDir)+" 2>/dev/null || true")
		if strings.TrimSpace(string(out)) != "" {
			t.Fatalf("node %s after uninstall:\n%s", n.Name, out)
		}
		if ps := nodeProcs(tf, n, l.Binary()); len(ps) > 0 {
			t.Fatalf("node %s after uninstall still runs %v", n.Name, ps)
		}
	}
}

// nodeProcs lists node n's processes whose command line contains s (the
// hosts share this machine's pid namespace, so pgrep would also see other
// hosts' processes).
func nodeProcs(tf *testfleet.Fleet, n *testfleet.Node, s string) []string {
	var out []string
	for _, pid := range tf.NodePIDs(n) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, fmt.Sprintf("%d %s", pid, strings.ReplaceAll(string(b), "\x00", " ")))
		}
	}
	return out
}

// runControl loads cfgFile and runs its control service in this process
// until the test ends; the returned channel receives RunDev's result.
func runControl(t *testing.T, cfgFile string) chan error {
	t.Helper()
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	// Runs after the in-process service stopped (cleanups run last first):
	// a config change ends that service (ErrReload, which the worker
	// program answers by exec'ing itself), and the next starter then
	// starts one in the background for the state_dir; it must not outlive
	// the test.
	t.Cleanup(func() {
		if o, ok := control.Find(cfg.StateDir); ok && o.PID != os.Getpid() {
			if _, _, err := control.Stop(context.Background(), cfg.StateDir, 30*time.Second); err != nil {
				t.Errorf("stop the control service pid %d the starter started for %s: %v", o.PID, cfg.StateDir, err)
			}
		}
	})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- workers.RunDev(ctx, cfg, zap.NewNop(), workers.Options{}) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the control service did not stop within 30 s")
		}
	})
	return done
}

func waitControl(t *testing.T, state string, done chan error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if o, ok := control.Find(state); ok && o.Frontend != "" {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("control service ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the control service did not publish its frontend within 60 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
