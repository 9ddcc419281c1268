package images

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/relay"
	"github.com/sparklane/sparklane/internal/pki"
	"github.com/sparklane/sparklane/internal/testkit/testfleet"
)

// memberEnv carries a memberJob to this test binary run inside a test
// fleet node (TestMain): the node's own process, network and Docker.
const memberEnv = "SPARKLANE_IMAGES_MEMBER"

// memberJob is one chain member's part, as a node process runs it.
type memberJob struct {
	Node, Upstream, UpstreamAddr, Downstream, ListenAddr string
	Spec                                                 Spec
	Have                                                 int
	DockerHost                                           string
	Identity                                             relay.Identity
	// KillAfter, when set, ends the member's process (exit 3) once it
	// made that many of the image's layers durable: a worker killed at a
	// layer boundary.
	KillAfter int
}

func TestMain(m *testing.M) {
	if job := os.Getenv(memberEnv); job != "" {
		os.Exit(runMember(job))
	}
	os.Exit(m.Run())
}

// runMember runs one member in this process and prints what it moved.
func runMember(job string) int {
	var j memberJob
	if err := json.Unmarshal([]byte(job), &j); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	srv, err := relay.ServerTLS(j.Identity)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cli, err := relay.ClientTLS(j.Identity)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	d, err := client.NewClientWithOpts(client.WithHost(j.DockerHost), client.WithAPIVersionNegotiation())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	m := Member{Docker: d, Node: j.Node, Spec: j.Spec, Have: j.Have, Upstream: j.Upstream, UpstreamAddr: j.UpstreamAddr, Downstream: j.Downstream,
		ListenAddr: j.ListenAddr, ServerTLS: srv, ClientTLS: cli, Wait: 2 * time.Minute}
	if j.KillAfter > 0 {
		m.Durable = func(_ Spec, layers int) error {
			if layers >= j.KillAfter {
				fmt.Fprintf(os.Stderr, "killed after %d durable layers\n", layers)
				os.Exit(3)
			}
			return nil
		}
	}
	moved, err := m.Run(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	b, _ := json.Marshal(moved)
	fmt.Println(string(b))
	return 0
}

// fleetNet is a test fleet with its nodes' Docker clients and fleet
// identities.
type fleetNet struct {
	t      testing.TB
	f      *testfleet.Fleet
	docker map[string]*client.Client
	pki    string
}

func newFleetNet(t testing.TB, name string, nodes int) *fleetNet {
	f := testfleet.New(t, testfleet.Options{Name: name, Nodes: nodes, Docker: true})
	fn := &fleetNet{t: t, f: f, docker: map[string]*client.Client{}, pki: filepath.Join(f.Dir(), "pki")}
	ca, err := pki.LoadOrCreateCA(fn.pki, "images test fleet CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range f.Nodes() {
		if _, err := ca.Peer(pki.FleetPeerPrefix+n.Name, []string{n.IP}); err != nil {
			t.Fatal(err)
		}
		c, err := client.NewClientWithOpts(client.WithHost("unix://"+n.DockerSocket), client.WithAPIVersionNegotiation())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fn.docker[n.Name] = c
	}
	return fn
}

func (fn *fleetNet) node(name string) *testfleet.Node {
	for _, n := range fn.f.Nodes() {
		if n.Name == name {
			return n
		}
	}
	fn.t.Fatalf("no node %s", name)
	return nil
}

// rx is how many bytes node's eth0 has received: the wire, TLS and TCP
// included (/proc/net/dev: the reader's network namespace, where /sys
// would show the host's).
func (fn *fleetNet) rx(name string) int64 {
	out, err := fn.f.Exec(fn.node(name), "cat", "/proc/net/dev")
	if err != nil {
		fn.t.Fatal(err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		dev, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || dev != "eth0" {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			fn.t.Fatal(err)
		}
		return v
	}
	fn.t.Fatalf("node %s has no eth0 in /proc/net/dev:\n%s", name, out)
	return 0
}

// inventory and plan ref over the fleet's nodes, as the workflow does.
func (fn *fleetNet) plan(ctx context.Context, ref contract.ImageRef) (contract.ImagePlan, []Inventory, error) {
	var invs []Inventory
	var diff []string
	for _, n := range fn.f.Nodes() {
		inv, err := Inspect(ctx, fn.docker[n.Name], ref, n.Name)
		if err != nil {
			return contract.ImagePlan{}, nil, err
		}
		if inv.Present && diff == nil {
			diff = inv.DiffIDs
		}
		invs = append(invs, inv)
	}
	for i := range invs {
		if !invs[i].Present && diff != nil {
			h, cd, err := HaveLayers(ctx, fn.docker[invs[i].Node], invs[i].Node, diff)
			if err != nil {
				return contract.ImagePlan{}, nil, err
			}
			invs[i].HaveLayers, invs[i].Containerd = h, cd
		}
	}
	p, err := plan(ref, invs)
	return p, invs, err
}

// transfer runs the plan's chain, each member in its own node's
// namespaces, and returns what each moved and each node's eth0 rx delta.
func (fn *fleetNet) transfer(ref contract.ImageRef, p contract.ImagePlan, invs []Inventory) (map[string]Moved, map[string]int64, time.Duration) {
	moved, rx, took, failed := fn.transferKilling(ref, p, invs, nil)
	for n, e := range failed {
		fn.t.Errorf("member %s: %s", n, e)
	}
	if fn.t.Failed() {
		fn.t.FailNow()
	}
	return moved, rx, took
}

// transferKilling is transfer with members killed at a layer boundary
// (kill: node → KillAfter); failed has each failed member's error.
func (fn *fleetNet) transferKilling(ref contract.ImageRef, p contract.ImagePlan, invs []Inventory, kill map[string]int) (map[string]Moved, map[string]int64, time.Duration, map[string]string) {
	failed := map[string]string{}
	have := map[string]int{}
	for _, inv := range invs {
		have[inv.Node] = inv.HaveLayers
	}
	spec := Spec{ID: p.ID, DiffIDs: p.DiffIDs, From: p.From, Tag: ref.Name}
	rx0 := map[string]int64{}
	for _, n := range fn.f.Nodes() {
		rx0[n.Name] = fn.rx(n.Name)
	}
	var mu sync.Mutex
	moved := map[string]Moved{}
	var wg sync.WaitGroup
	start := time.Now()
	for _, h := range p.Hops() {
		n := fn.node(h.Node)
		j := memberJob{Node: h.Node, Upstream: h.Upstream, Downstream: h.Downstream, ListenAddr: n.IP + ":7291", Spec: spec, Have: have[h.Node],
			DockerHost: "unix://" + testfleet.NodeDockerSocket, KillAfter: kill[h.Node],
			Identity: relay.Identity{CA: filepath.Join(fn.pki, "ca.pem"), Cert: filepath.Join(fn.pki, pki.FleetPeerPrefix+h.Node+".pem"), Key: filepath.Join(fn.pki, pki.FleetPeerPrefix+h.Node+"-key.pem")}}
		if h.Upstream != "" {
			j.UpstreamAddr = fn.node(h.Upstream).IP + ":7291"
		}
		b, _ := json.Marshal(j)
		self, err := os.Executable()
		if err != nil {
			fn.t.Fatal(err)
		}
		cmd := fn.f.Command(n, self)
		cmd.Env = append(os.Environ(), memberEnv+"="+string(b))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				mu.Lock()
				failed[h.Node] = fmt.Sprintf("%v: %s", err, errb.String())
				mu.Unlock()
				return
			}
			var m Moved
			if err := json.Unmarshal(out.Bytes(), &m); err != nil {
				fn.t.Errorf("member %s printed %q: %v", h.Node, out.String(), err)
				return
			}
			mu.Lock()
			moved[h.Node] = m
			mu.Unlock()
		}()
	}
	wg.Wait()
	took := time.Since(start)
	rx := map[string]int64{}
	for _, n := range fn.f.Nodes() {
		rx[n.Name] = fn.rx(n.Name) - rx0[n.Name]
	}
	return moved, rx, took, failed
}

// build builds tag on node from base (or scratch) with one layer of size
// random bytes.
func (fn *fleetNet) build(node, tag, base string, size int) image.InspectResponse {
	c := fn.docker[node]
	return buildImage(fn.t, c, tag, base, size)
}

// On three test fleet hosts with their own dockerds: an image built from
// scratch on h1 only reaches h2 and h3 through the chain (same image ID
// there); a second pass moves nothing; an image that adds one small layer
// moves only that layer to each node (counted on each node's eth0); a
// wrong pinned digest is refused before anything moves; an image built on
// h1 from a [build] context reaches the others the same way.
func TestImagesAcrossTheTestFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fn := newFleetNet(t, "images", 3)
	const baseSize, topSize = 8 << 20, 512 << 10
	repo := "sparklane-imgtest/fleet"
	v1 := fn.build("h1", repo+":v1", "", baseSize)

	// A wrong pin: refused on the node that has the image, nothing moves.
	pin := "sha256:" + strings.Repeat("5a", 32)
	rx2 := fn.rx("h2")
	_, _, err := fn.plan(ctx, mustRef(t, repo+":v1@"+pin))
	if typ := imageErrType(err); typ != DigestMismatch || !strings.Contains(err.Error(), "node h1") || !strings.Contains(err.Error(), pin) {
		t.Fatalf("wrong pin: %v", err)
	}
	if d := fn.rx("h2") - rx2; d > 4096 {
		t.Fatalf("h2 received %d bytes after a refused pin", d)
	}

	ref := mustRef(t, repo+":v1")
	p, invs, err := fn.plan(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.Chain, ",") != "h1,h2,h3" || p.From != 0 {
		t.Fatalf("plan %+v", p)
	}
	moved, rx, took := fn.transfer(ref, p, invs)
	t.Logf("cold: %v in %s; rx %v", moved, took, rx)
	for _, n := range []string{"h2", "h3"} {
		ins, err := fn.docker[n].ImageInspect(ctx, ref.Name)
		if err != nil || ins.ID != v1.ID {
			t.Fatalf("%s: %s is %s (%v), want %s", n, ref.Name, ins.ID, err, v1.ID)
		}
		if rx[n] < baseSize || rx[n] > baseSize*11/10 {
			t.Errorf("%s received %d bytes on the wire for an image of %d", n, rx[n], baseSize)
		}
	}
	if moved["h1"].BytesOut > baseSize*11/10 || rx["h1"] > baseSize/10 {
		t.Errorf("the source sent %d bytes (wire rx %d) for an image of %d: want about one copy", moved["h1"].BytesOut, rx["h1"], baseSize)
	}

	// A second pass: every node has it, nothing moves.
	if p, _, err := fn.plan(ctx, ref); err != nil || len(p.Chain) != 0 {
		t.Fatalf("second pass: plan %+v, %v: want nothing to move", p, err)
	}

	// One small layer more: only it crosses.
	v2 := fn.build("h1", repo+":v2", repo+":v1", topSize)
	ref2 := mustRef(t, repo+":v2")
	p, invs, err = fn.plan(ctx, ref2)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.Chain, ",") != "h1,h2,h3" || p.From != 1 {
		t.Fatalf("plan %+v", p)
	}
	moved, rx, took = fn.transfer(ref2, p, invs)
	t.Logf("one layer: %v in %s; rx %v", moved, took, rx)
	for _, n := range []string{"h2", "h3"} {
		ins, err := fn.docker[n].ImageInspect(ctx, ref2.Name)
		if err != nil || ins.ID != v2.ID {
			t.Fatalf("%s: %s is %s (%v), want %s", n, ref2.Name, ins.ID, err, v2.ID)
		}
		if moved[n].Layers != 1 || rx[n] > topSize*12/10 {
			t.Errorf("%s: received %d layers, %d bytes on the wire, for one layer of %d", n, moved[n].Layers, rx[n], topSize)
		}
	}

	// A recipe's [build] on h1 (a context under a shared root, on h1's
	// own dockerd): the built image reaches h2 and h3 with the same ID,
	// only its new layer crossing.
	shared, dir := writeContext(t, "FROM "+repo+":v2\nCOPY payload /payload\n")
	built, err := Build(ctx, fn.docker["h1"], "h1", repo+":built", contract.Build{Context: dir, Dockerfile: "docker/Dockerfile"}, []string{shared}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref3 := mustRef(t, repo+":built")
	p, invs, err = fn.plan(ctx, ref3)
	if err != nil || strings.Join(p.Chain, ",") != "h1,h2,h3" || p.From != 2 {
		t.Fatalf("built image: plan %+v, %v", p, err)
	}
	moved, _, _ = fn.transfer(ref3, p, invs)
	for _, n := range []string{"h2", "h3"} {
		ins, err := fn.docker[n].ImageInspect(ctx, ref3.Name)
		if err != nil || ins.ID != built.ID || moved[n].Layers != 1 {
			t.Fatalf("%s: %s is %s (%v), %d layers moved; want %s built on h1, one layer", n, ref3.Name, ins.ID, err, moved[n].Layers, built.ID)
		}
	}
}

// A transfer killed on h3 once two of the image's four layers are loaded
// there (a test hook at the layer boundary, the member's process exits)
// resumes: the next plan sees those layers on h3 (helper tags hold them),
// the stream to h3 carries only the layers above them, and the helper
// tags are gone once the image is loaded.
func TestTransferResumesAboveTheLoadedLayers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	fn := newFleetNet(t, "imgres", 3)
	const layer, n, kill = 4 << 20, 4, 2
	repo := "sparklane-imgtest/resume"
	base := ""
	var img image.InspectResponse
	for i := 1; i <= n; i++ {
		tag := fmt.Sprintf("%s:l%d", repo, i)
		img = fn.build("h1", tag, base, layer)
		base = tag
	}
	ref := mustRef(t, base)
	p, invs, err := fn.plan(ctx, ref)
	if err != nil || strings.Join(p.Chain, ",") != "h1,h2,h3" || p.From != 0 {
		t.Fatalf("plan %+v, %v", p, err)
	}
	_, _, _, failed := fn.transferKilling(ref, p, invs, map[string]int{"h3": kill})
	if _, ok := failed["h3"]; !ok {
		t.Fatalf("h3 was not killed: failed %v", failed)
	}
	t.Logf("first attempt: failed %v", failed)
	have, _, err := HaveLayers(ctx, fn.docker["h3"], "h3", img.RootFS.Layers)
	if err != nil || have < kill || have >= n {
		t.Fatalf("h3 has %d of %d layers after its kill (%v), want %d..%d", have, n, err, kill, n-1)
	}

	p, invs, err = fn.plan(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second plan: chain %v from layer %d", p.Chain, p.From+1)
	if p.Chain[len(p.Chain)-1] != "h3" || p.From < kill {
		t.Fatalf("second plan %+v: want h3 last, from layer %d on", p, kill+1)
	}
	moved, rx, _ := fn.transfer(ref, p, invs)
	t.Logf("second attempt: %v; rx %v", moved, rx)
	if want := int64(n-have) * layer; rx["h3"] > want*11/10+64<<10 {
		t.Errorf("h3 received %d bytes on the wire, want about the %d layers above its %d (%d bytes)", rx["h3"], n-have, have, want)
	}
	for _, node := range []string{"h2", "h3"} {
		ins, err := fn.docker[node].ImageInspect(ctx, ref.Name)
		if err != nil || ins.ID != img.ID {
			t.Fatalf("%s: %s is %s (%v), want %s", node, ref.Name, ins.ID, err, img.ID)
		}
		l, err := fn.docker[node].ImageList(ctx, image.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range l {
			for _, tag := range s.RepoTags {
				if strings.HasPrefix(tag, PartialRepo) {
					t.Errorf("%s: helper tag %s left after the load", node, tag)
				}
			}
		}
	}
}
