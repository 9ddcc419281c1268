package power_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/engine/power"
	"github.com/sparklane/sparklane/internal/testkit/hatest"
	"github.com/sparklane/sparklane/internal/testkit/rostest"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

const tokenEnv = "SPARKLANE_TEST_HA_TOKEN"

// eventLog records the global order of events across the doubles.
type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (l *eventLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.ev); n > 0 && l.ev[n-1] == s && strings.HasPrefix(s, "probe:") {
		return // collapse repeated probe results
	}
	l.ev = append(l.ev, s)
}

func (l *eventLog) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ev)
}

// rig is a switch behind a Home Assistant relay, shut down through the
// RouterOS API double; the reachability probe is a fake that asks the
// simulated device (Home Assistant and the MikroTik cannot run here).
type rig struct {
	ha     *hatest.Server
	dev    *hatest.Device
	ros    *rostest.Server
	log    *eventLog
	engine *power.Engine
	target power.Target
}

func newRig(t *testing.T, bootsBackAfter int, ignoresShutdown bool) *rig {
	t.Setenv(tokenEnv, leakToken)
	t.Setenv("SPARKLANE_TEST_ROS_PW", "ros-pw-31337")
	r := &rig{log: &eventLog{}}
	r.ha = hatest.Start(t, leakToken)
	r.ha.AddSwitch("switch.sw1_outlet", "on")
	r.dev = r.ha.Device("switch.sw1_outlet")
	r.dev.BootsBackAfter = bootsBackAfter
	r.dev.IgnoresShutdown = ignoresShutdown
	r.ha.OnCall(func(c hatest.Call) {
		if c.Service != "" {
			r.log.add("ha:" + c.Service)
		}
	})
	r.ros = rostest.Start(t, rostest.Options{User: "ops", Password: "ros-pw-31337", OnShutdown: func() {
		r.log.add("shutdown")
		r.dev.Shutdown()
	}})
	r.engine = &power.Engine{Reachable: func(ctx context.Context, tg power.Target) error {
		if r.dev.Reachable() {
			r.log.add("probe:up")
			return nil
		}
		r.log.add("probe:down")
		return fmt.Errorf("%s: no route to host (simulated)", tg.Name)
	}}
	r.target = power.DeviceTarget(config.Device{Name: "sw1", Power: config.Power{
		Relay: "switch.sw1_outlet", HAURL: r.ha.URL, TokenEnv: tokenEnv,
		Shutdown: "routeros:ops@" + r.ros.Addr + "?password_env=SPARKLANE_TEST_ROS_PW",
	}})
	return r
}

func (r *rig) offInput() power.OffInput {
	return power.OffInput{Target: r.target, UnreachableBound: 2 * time.Second, Interval: 10 * time.Millisecond,
		RelayBound: time.Second, RelayInterval: 10 * time.Millisecond}
}

func TestOffSequenceOrder(t *testing.T) {
	// The device boots back by itself after 5 checks if its relay stays on
	// (the lesson); Off must end with the relay off so it stays down.
	r := newRig(t, 5, false)
	res, err := r.engine.Off(context.Background(), r.offInput())
	if err != nil {
		t.Fatal(err)
	}
	wantEv := []string{"shutdown", "probe:down", "ha:turn_off"}
	got := r.log.events()
	if fmt.Sprint(got) != fmt.Sprint(wantEv) {
		t.Fatalf("event order %v, want %v", got, wantEv)
	}
	if res.State != power.StateOff || len(res.Warnings) != 0 {
		t.Fatalf("result %+v", res)
	}
	if fmt.Sprint(res.Steps) != "[shutdown wait-unreachable relay-off]" {
		t.Fatalf("steps %v", res.Steps)
	}
	if res.Unreachable.Probes < 2 || res.Relay.State != "off" || res.Shutdown.Method != "routeros" {
		t.Fatalf("step results %+v", res)
	}
	if r.ha.State("switch.sw1_outlet") != "off" {
		t.Fatal("relay not off")
	}
	for range 10 {
		if r.dev.Reachable() {
			t.Fatal("device booted back although Off completed")
		}
	}
}

func TestOffRelayFailureIsWarning(t *testing.T) {
	r := newRig(t, 0, false)
	r.ha.FailService("switch.sw1_outlet", 500)
	res, err := r.engine.Off(context.Background(), r.offInput())
	if err != nil {
		t.Fatalf("relay failure after a good shutdown must not fail Off: %v", err)
	}
	if res.State != power.StateOff || len(res.Warnings) != 1 {
		t.Fatalf("result %+v", res)
	}
	w := res.Warnings[0]
	for _, want := range []string{"device sw1 is shut down but its relay did not switch off", "switch.sw1_outlet", "500", "may boot back"} {
		if !strings.Contains(w, want) {
			t.Errorf("warning %q lacks %q", w, want)
		}
	}
	if strings.Contains(w, leakToken) {
		t.Fatal("warning leaks the token")
	}
}

func TestOffDeviceIgnoringShutdown(t *testing.T) {
	r := newRig(t, 0, true)
	in := r.offInput()
	in.UnreachableBound = 100 * time.Millisecond
	res, err := r.engine.Off(context.Background(), in)
	if !errors.Is(err, power.ErrBoundExceeded) || !strings.Contains(err.Error(), "device sw1 still answers") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("want bound error naming the device and --force, got %v", err)
	}
	if len(r.ha.ServiceCalls()) != 0 || res.State != "" {
		t.Fatalf("relay must stay untouched without --force: calls %v, result %+v", r.ha.ServiceCalls(), res)
	}

	in.Force = true
	res, err = r.engine.Off(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if res.State != power.StateOff || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "cutting the relay although") {
		t.Fatalf("forced result %+v", res)
	}
	if r.dev.Reachable() || r.ha.State("switch.sw1_outlet") != "off" {
		t.Fatal("forced Off must leave the device unpowered")
	}
}

func TestOffNoWayToPowerOff(t *testing.T) {
	var e power.Engine
	_, err := e.Off(context.Background(), power.OffInput{Target: power.Target{Name: "x", Kind: "device"}})
	if !errors.Is(err, power.ErrNoPowerOff) || !strings.Contains(err.Error(), "device x") {
		t.Fatalf("got %v", err)
	}
	_, err = e.On(context.Background(), power.OnInput{Target: power.Target{Name: "x", Kind: "node"}})
	if !errors.Is(err, power.ErrNoPowerOn) || !strings.Contains(err.Error(), "node x") {
		t.Fatalf("got %v", err)
	}
}

// The graceful SSH path inside Off: real sshd, Home Assistant double, and a
// fake probe that reports the node down once the shutdown command has run.
func TestOffOverSSH(t *testing.T) {
	t.Setenv(tokenEnv, leakToken)
	srv := sshdtest.Start(t)
	ha := hatest.Start(t, leakToken)
	ha.AddSwitch("switch.dgx1_outlet", "on")
	marker := filepath.Join(t.TempDir(), "poweroff-ran")
	n := config.Node{Name: "dgx1", SSH: fmt.Sprintf("root@127.0.0.1:%d", srv.Port), KnownHosts: srv.KnownHostsFile, Identity: srv.IdentityFile,
		Power: config.Power{Relay: "switch.dgx1_outlet", HAURL: ha.URL, TokenEnv: tokenEnv, Shutdown: "ssh:touch " + marker}}
	var log eventLog
	ha.OnCall(func(c hatest.Call) {
		if c.Service != "" {
			log.add("ha:" + c.Service)
		}
	})
	e := &power.Engine{Reachable: func(ctx context.Context, tg power.Target) error {
		if exists(marker) {
			log.add("probe:down")
			return errors.New("down (simulated)")
		}
		log.add("probe:up")
		return nil
	}}
	res, err := e.Off(context.Background(), power.OffInput{Target: power.NodeTarget(n), Interval: 10 * time.Millisecond, RelayInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("%v\nsshd log:\n%s", err, srv.Log())
	}
	if !exists(marker) || res.State != power.StateOff || res.Shutdown.Method != "ssh" {
		t.Fatalf("result %+v", res)
	}
	if got := fmt.Sprint(log.events()); got != "[probe:down ha:turn_off]" {
		t.Fatalf("events %s: the relay must go off only after the node is down", got)
	}
}

func TestOnRelayThenReachable(t *testing.T) {
	r := newRig(t, 0, false)
	r.dev.Shutdown()
	r.ha.SetState("switch.sw1_outlet", "off")
	r.ha.SetLag("switch.sw1_outlet", 2)
	polled := 0
	r.engine.Polling = func(ctx context.Context, tg power.Target) error { polled++; return nil }
	r.target.Kind = "node"
	res, err := r.engine.On(context.Background(), power.OnInput{Target: r.target, ReachableBound: time.Second, Interval: 10 * time.Millisecond, RelayInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != power.StateFree || fmt.Sprint(res.Steps) != "[relay-on wait-reachable]" || res.Relay.State != "on" || res.Relay.Polls != 3 {
		t.Fatalf("result %+v", res)
	}
	if polled == 0 {
		t.Fatal("node worker polling check not consulted")
	}
	if got := r.log.events(); got[0] != "ha:turn_on" || got[len(got)-1] != "probe:up" {
		t.Fatalf("events %v", got)
	}
}

func TestOnWakeOnLAN(t *testing.T) {
	pc := listenUDP(t)
	mac := "aa:bb:cc:00:11:22"
	woke := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 200)
		pc.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := pc.ReadFromUDP(buf)
		if err == nil {
			woke <- buf[:n]
		}
	}()
	var got []byte
	e := &power.Engine{Reachable: func(ctx context.Context, tg power.Target) error {
		if got != nil {
			return nil
		}
		select {
		case got = <-woke:
			return nil
		default:
			return errors.New("not up yet (simulated)")
		}
	}}
	tgt := power.Target{Name: "dgx2", Kind: "node", Power: config.Power{WOL: mac, Broadcast: pc.LocalAddr().String()}}
	res, err := e.On(context.Background(), power.OnInput{Target: tgt, ReachableBound: 5 * time.Second, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hw, _ := net.ParseMAC(mac)
	if res.State != power.StateFree || fmt.Sprint(res.Steps) != "[wake-on-lan wait-reachable]" || !bytes.Equal(got[6:12], hw) || len(got) != 102 {
		t.Fatalf("result %+v, packet % x", res, got)
	}
}

func TestRelayStateForFleetProbe(t *testing.T) {
	t.Setenv(tokenEnv, leakToken)
	ha := hatest.Start(t, leakToken)
	ha.AddSwitch("switch.on", "on")
	ha.AddSwitch("switch.off", "off")
	ha.AddSwitch("switch.gone", "unavailable")
	ctx := context.Background()
	p := config.Power{HAURL: ha.URL, TokenEnv: tokenEnv}
	for _, c := range []struct {
		relay     string
		on, known bool
	}{{"switch.on", true, true}, {"switch.off", false, true}, {"switch.gone", false, false}, {"", false, false}} {
		p.Relay = c.relay
		on, known, err := power.RelayState(ctx, p)
		if err != nil || on != c.on || known != c.known {
			t.Errorf("%q: on=%v known=%v err=%v; want on=%v known=%v", c.relay, on, known, err, c.on, c.known)
		}
	}
	t.Setenv(tokenEnv, "wrong-token-value")
	p.Relay = "switch.on"
	_, _, err := power.RelayState(ctx, p)
	if err == nil || !strings.Contains(err.Error(), "token_env "+tokenEnv) || strings.Contains(err.Error(), "wrong-token-value") {
		t.Fatalf("wrong token: %v", err)
	}
}

// The token must never reach anything a workflow would record: results,
// errors, warnings, inputs. Run every step, marshal it all, search.
func TestTokenNeverInOutputs(t *testing.T) {
	r := newRig(t, 0, false)
	var outputs []any
	var errs []error
	ctx := context.Background()
	off, err := r.engine.Off(ctx, r.offInput())
	outputs, errs = append(outputs, r.offInput(), off), append(errs, err)
	on, err := r.engine.On(ctx, power.OnInput{Target: r.target, Interval: 10 * time.Millisecond, RelayInterval: 10 * time.Millisecond})
	outputs, errs = append(outputs, on), append(errs, err)
	r.ha.FailService("switch.sw1_outlet", 500)
	r.ha.EchoAuthOnError = true
	rel, err := r.engine.RelayOff(ctx, power.RelayInput{Target: r.target, Bound: 50 * time.Millisecond})
	outputs, errs = append(outputs, rel), append(errs, err)
	warnOff, err := r.engine.Off(ctx, r.offInput())
	outputs, errs = append(outputs, warnOff), append(errs, err)
	bad := r.target
	bad.Power.HAURL = r.ha.URL
	t.Setenv(tokenEnv, leakToken+"-but-wrong")
	_, err = r.engine.RelayOn(ctx, power.RelayInput{Target: bad})
	errs = append(errs, err)

	var all strings.Builder
	for _, o := range outputs {
		b, jerr := json.Marshal(o)
		if jerr != nil {
			t.Fatal(jerr)
		}
		all.Write(b)
		fmt.Fprintf(&all, "%+v %#v", o, o)
	}
	nonNil := 0
	for _, e := range errs {
		if e != nil {
			nonNil++
			fmt.Fprintf(&all, "%v %+v", e, e)
			b, _ := json.Marshal(map[string]string{"error": e.Error()})
			all.Write(b)
		}
	}
	if nonNil < 2 || !strings.Contains(all.String(), "Bearer ***") {
		t.Fatalf("the sweep must include failing calls that quote auth (got %d errors)", nonNil)
	}
	if strings.Contains(all.String(), leakToken) {
		t.Fatalf("token found in outputs:\n%s", all.String())
	}
	if !strings.Contains(all.String(), tokenEnv) {
		t.Fatal("outputs should name the token's env var (sanity: the sweep saw the target)")
	}
}

func TestWaitUnreachableNeedsTwoMisses(t *testing.T) {
	// up, miss (a lost packet), up, miss, miss → down after 5 probes.
	script := []bool{true, false, true, false, false, false}
	i := 0
	probe := func(context.Context) error {
		up := script[min(i, len(script)-1)]
		i++
		if up {
			return nil
		}
		return errors.New("timeout (simulated)")
	}
	n, err := power.WaitUnreachable(context.Background(), probe, 5*time.Second, time.Millisecond)
	if err != nil || n != 5 {
		t.Fatalf("probes %d, err %v; want 5, nil", n, err)
	}
	i = 0
	n, err = power.WaitReachable(context.Background(), func(context.Context) error {
		i++
		if i < 3 {
			return errors.New("refused (simulated)")
		}
		return nil
	}, 5*time.Second, time.Millisecond)
	if err != nil || n != 3 {
		t.Fatalf("WaitReachable probes %d, err %v", n, err)
	}
	_, err = power.WaitReachable(context.Background(), func(context.Context) error { return errors.New("no route (simulated)") }, 20*time.Millisecond, 5*time.Millisecond)
	if !errors.Is(err, power.ErrBoundExceeded) || !strings.Contains(err.Error(), "no route (simulated)") {
		t.Fatalf("bound: %v", err)
	}
}

func TestAliveProbe(t *testing.T) {
	// A refused connection means the kernel still answers: alive.
	port := sshdtest.FreePort(t)
	if err := power.AliveProbe(fmt.Sprintf("127.0.0.1:%d", port))(context.Background()); err != nil {
		t.Fatalf("refused port must count as alive: %v", err)
	}
	// Nothing answering within the probe's deadline: not alive. (No
	// address is reliably silent on this network, so an expired deadline
	// stands in for a host that never answers.)
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	if err := power.AliveProbe(fmt.Sprintf("127.0.0.1:%d", port))(ctx); err == nil {
		t.Fatal("a probe past its deadline must fail")
	}
}
