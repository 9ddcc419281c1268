package itest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-connections/nat"

	"github.com/sparklane/sparklane/internal/contract"
)

// An engine started by hand (a real container sparklane did not start,
// holding the lane's API port) makes its node occupied by "foreign", named,
// through the real server and workers: status says so, a cutover is
// refused naming the container and leaves it running; with --stop-foreign
// the cutover stops it (never removes it) and serves the lane.
func TestForeignEngineOccupiesNodeUntilStopForeign(t *testing.T) {
	f, dc := demoFleet(t, 8<<20)
	r, plan := f.lanePlan("demo-2x")
	ctx := withTimeout(t, 10*time.Minute)

	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := "by-hand-engine-" + hex.EncodeToString(b)
	port := strconv.Itoa(plan.APIPort)
	hub := ""
	for _, m := range r.Mounts {
		if m.Dst == "/hub" {
			hub = m.Src
		}
	}
	// engine-sim as an operator would start it: loading slowly, its API
	// port published on loopback.
	c, err := dc.ContainerCreate(ctx, &container.Config{Image: r.Image,
		Cmd:          []string{"/engine-sim", "/hub", "--served-model-name", r.Model, "--host", "0.0.0.0", "--port", port, "--load-mibps", "0.01"},
		ExposedPorts: nat.PortSet{nat.Port(port + "/tcp"): {}}},
		&container.HostConfig{Binds: []string{hub + ":/hub:ro"},
			PortBindings: nat.PortMap{nat.Port(port + "/tcp"): {{HostIP: "127.0.0.1", HostPort: port}}}}, nil, nil, name)
	if err != nil {
		t.Fatalf("create the foreign container: %v", err)
	}
	t.Cleanup(func() { _ = dc.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })
	if err := dc.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatalf("start the foreign container: %v", err)
	}

	if ins, err := dc.ContainerInspect(ctx, c.ID); err != nil || !ins.State.Running {
		t.Fatalf("the foreign engine is not running: %v %+v", err, ins.State)
	}

	// The refused cutover names it and leaves it running.
	code, res, errOut := cutover(t, f, "--lane", "demo-2x")
	if code == 0 || res.OK || !strings.Contains(res.Error, name+" (port "+port+")") || !strings.Contains(res.Error, "--stop-foreign") {
		t.Fatalf("cutover onto a foreign engine: exit %d ok=%v error %q; want refused naming %s\n%s", code, res.OK, res.Error, name, errOut)
	}
	if ins, err := dc.ContainerInspect(ctx, c.ID); err != nil || !ins.State.Running {
		t.Fatalf("the foreign container was touched without --stop-foreign: %v", err)
	}
	if running, _ := laneContainers(t, dc, "demo-2x"); running != 0 {
		t.Errorf("%d demo-2x containers started beside a foreign engine", running)
	}
	// Each of n1 and n2 is occupied by it (other tests' lanes on the same
	// Docker engine may be listed beside it).
	for _, n := range []string{"n1", "n2"} {
		at := strings.Index(res.Error, n+": occupied (")
		if at < 0 {
			t.Errorf("refusal %q does not say %s is occupied", res.Error, n)
			continue
		}
		seg := res.Error[at:]
		if end := strings.Index(seg, "); n"); end > 0 {
			seg = seg[:end]
		}
		if want := "foreign: " + name + " (port " + port + ")"; !strings.HasPrefix(seg, n+": occupied (") || !strings.Contains(seg, want) {
			t.Errorf("refusal %q does not say %s is occupied by %q", res.Error, n, want)
		}
	}

	// `status` asks for no lane's port: a container holding no GPU is
	// not foreign there, and the nodes are free.
	code, out, errOut := f.starter(ctx, "status", "--json")
	var probe contract.FleetProbeResult
	if code != 0 || json.Unmarshal([]byte(out), &probe) != nil {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, n := range probe.Nodes {
		if len(n.Foreign) != 0 {
			t.Errorf("status: %s foreign %v; the container holds no GPU", n.Node, n.Foreign)
		}
	}

	// --stop-foreign: stopped, kept, and the lane serves.
	code, res, errOut = cutover(t, f, "--lane", "demo-2x", "--stop-foreign")
	if code != 0 || !res.OK {
		t.Fatalf("cutover --stop-foreign: exit %d %+v\n%s", code, res, errOut)
	}
	saveHistory(t, f, contract.CutoverID("demo-2x"), "cutover-stop-foreign")
	if !strings.Contains(strings.Join(res.StoppedForeign, ","), "/"+name) {
		t.Errorf("stopped foreign %v, want %s", res.StoppedForeign, name)
	}
	ins, err := dc.ContainerInspect(ctx, c.ID)
	if err != nil {
		t.Fatalf("the foreign container was removed, not stopped: %v", err)
	}
	if ins.State.Running {
		t.Errorf("the foreign container still runs after --stop-foreign")
	}
	if running, _ := laneContainers(t, dc, "demo-2x"); running != 2 {
		t.Errorf("demo-2x: %d containers running, want 2", running)
	}
}
