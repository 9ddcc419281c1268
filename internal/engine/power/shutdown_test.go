package power_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/engine/power"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/rostest"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

func sshTarget(s *sshdtest.Server, shutdown string) power.Target {
	return power.Target{
		Name: "dgx-test", Kind: "node",
		SSH:        fmt.Sprintf("root@127.0.0.1:%d", s.Port),
		KnownHosts: s.KnownHostsFile, Identity: s.IdentityFile,
		Power: config.Power{Shutdown: shutdown},
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// The "shutdown command" in these tests is harmless (touch a file); the
// dropped-session case kills only the test sshd's own session process.
func TestShutdownSSHRealSSHD(t *testing.T) {
	srv := sshdtest.Start(t)
	dir := t.TempDir()
	var e power.Engine
	ctx := context.Background()

	marker := filepath.Join(dir, "graceful")
	res, err := e.Shutdown(ctx, power.ShutdownInput{Target: sshTarget(srv, "ssh:touch "+marker)})
	if err != nil {
		t.Fatalf("shutdown: %v\nsshd log:\n%s", err, srv.Log())
	}
	if !exists(marker) || res.Method != "ssh" || res.Dropped || res.Skipped {
		t.Fatalf("marker %v, result %+v", exists(marker), res)
	}

	// The session dropping mid-command (what poweroff does) is success.
	dropped := filepath.Join(dir, "dropped")
	t0 := time.Now()
	res, err = e.Shutdown(ctx, power.ShutdownInput{Target: sshTarget(srv, "ssh:touch "+dropped+"; kill -9 $PPID; sleep 5")})
	t.Logf("drop took %s", time.Since(t0))
	if err != nil {
		t.Fatalf("dropped session must count as success: %v", err)
	}
	if !res.Dropped || !exists(dropped) {
		t.Fatalf("want Dropped and the marker, got %+v (marker %v)", res, exists(dropped))
	}

	// A command still hanging at the step timeout (a machine that stopped
	// answering without closing the connection) counts as dropped too; the
	// next step, WaitUnreachable, checks the outcome.
	res, err = e.Shutdown(ctx, power.ShutdownInput{Target: sshTarget(srv, "ssh:sleep 30"), Timeout: 3 * time.Second})
	if err != nil || !res.Dropped {
		t.Fatalf("hanging command at timeout: %+v %v", res, err)
	}

	// A command that fails is an error naming the node and the command.
	_, err = e.Shutdown(ctx, power.ShutdownInput{Target: sshTarget(srv, "ssh:exit 3")})
	if err == nil || !strings.Contains(err.Error(), "node dgx-test") || !strings.Contains(err.Error(), "status 3") {
		t.Fatalf("want failure naming node and status, got %v", err)
	}

	// Host keys are always checked: a wrong known_hosts refuses to run.
	otherKey, _ := sshdtest.NewKey(t, dir, "other")
	kh := filepath.Join(dir, "known_hosts_wrong")
	os.WriteFile(kh, []byte(sshdtest.KnownHostsLine(srv.Port, otherKey)+"\n"), 0o600)
	tgt := sshTarget(srv, "ssh:touch "+filepath.Join(dir, "must-not-exist"))
	tgt.KnownHosts = kh
	_, err = e.Shutdown(ctx, power.ShutdownInput{Target: tgt})
	if typ, _ := fault.TypeOf(err); typ != fault.HostKeyMismatch {
		t.Fatalf("want HostKeyMismatch, got %v", err)
	}
	if exists(filepath.Join(dir, "must-not-exist")) {
		t.Fatal("command ran despite a host-key mismatch")
	}

	// WaitReachable's default probe is an authenticated SSH session.
	w, err := e.WaitReachable(ctx, power.WaitInput{Target: sshTarget(srv, ""), Bound: 5e9, Interval: 1e8})
	if err != nil || w.Probes != 1 {
		t.Fatalf("WaitReachable against live sshd: %+v %v", w, err)
	}
}

func TestParseShutdown(t *testing.T) {
	good := []struct {
		spec   string
		hasSSH bool
		want   power.ShutdownSpec
	}{
		{"", true, power.ShutdownSpec{Method: "ssh", Command: power.DefaultShutdownCommand}},
		{"", false, power.ShutdownSpec{}},
		{"ssh:", true, power.ShutdownSpec{Method: "ssh", Command: power.DefaultShutdownCommand}},
		{"ssh:shutdown -h now", true, power.ShutdownSpec{Method: "ssh", Command: "shutdown -h now"}},
		{"routeros:10.0.0.2", false, power.ShutdownSpec{Method: "routeros", User: "admin", Addr: "10.0.0.2:8728"}},
		{"routeros:ops@sw1:18728?password_env=SW_PW", false, power.ShutdownSpec{Method: "routeros", User: "ops", Addr: "sw1:18728", PasswordEnv: "SW_PW"}},
	}
	for _, g := range good {
		got, err := power.ParseShutdown(g.spec, g.hasSSH)
		if err != nil || got != g.want {
			t.Errorf("ParseShutdown(%q) = %+v, %v; want %+v", g.spec, got, err, g.want)
		}
	}
	for _, bad := range []string{"poweroff", "ipmi:host", "routeros:", "routeros:admin:secret@sw1", "routeros:sw1?password=x"} {
		_, err := power.ParseShutdown(bad, true)
		if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec || !strings.Contains(err.Error(), "power.shutdown") {
			t.Errorf("ParseShutdown(%q): want InvalidSpec naming power.shutdown, got %v", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret@") {
			t.Errorf("error quotes a password written in config: %v", err)
		}
	}
}

func TestShutdownRouterOS(t *testing.T) {
	t.Setenv("SPARKLANE_TEST_ROS_PW", "ros-pw-31337")
	ctx := context.Background()
	var e power.Engine
	for _, opt := range []rostest.Options{
		{User: "ops", Password: "ros-pw-31337"},
		{User: "ops", Password: "ros-pw-31337", Legacy: true, DropOnShutdown: true},
	} {
		srv := rostest.Start(t, opt)
		tgt := power.Target{Name: "sw1", Kind: "device", Power: config.Power{Shutdown: "routeros:ops@" + srv.Addr + "?password_env=SPARKLANE_TEST_ROS_PW"}}
		res, err := e.Shutdown(ctx, power.ShutdownInput{Target: tgt})
		if err != nil {
			t.Fatalf("%+v: %v", opt, err)
		}
		if res.Method != "routeros" || res.Dropped != opt.DropOnShutdown {
			t.Fatalf("%+v: result %+v", opt, res)
		}
		if got := srv.Commands(); len(got) != 1 || got[0] != "/system/shutdown" {
			t.Fatalf("%+v: commands %v", opt, got)
		}
	}

	srv := rostest.Start(t, rostest.Options{User: "ops", Password: "something-else"})
	tgt := power.Target{Name: "sw1", Kind: "device", Power: config.Power{Shutdown: "routeros:ops@" + srv.Addr + "?password_env=SPARKLANE_TEST_ROS_PW"}}
	_, err := e.Shutdown(ctx, power.ShutdownInput{Target: tgt})
	if typ, _ := fault.TypeOf(err); typ != fault.AuthFailed {
		t.Fatalf("want AuthFailed, got %v", err)
	}
	for _, want := range []string{"device sw1", srv.Addr, `"ops"`, "password_env SPARKLANE_TEST_ROS_PW"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "ros-pw-31337") {
		t.Fatalf("error leaks the password: %v", err)
	}
	if len(srv.Commands()) != 0 {
		t.Fatal("command sent without a login")
	}

	// Nothing listening: a transient error naming the address and port.
	tgt.Power.Shutdown = "routeros:127.0.0.1:1"
	_, err = e.Shutdown(ctx, power.ShutdownInput{Target: tgt})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || errors.Is(err, context.Canceled) {
		t.Fatalf("want dial error naming the address, got %v", err)
	}
	if _, perm := fault.TypeOf(err); perm {
		t.Fatalf("an unreachable API is transient: %v", err)
	}
}
