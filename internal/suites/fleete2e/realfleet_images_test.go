package fleete2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/images"
	"github.com/sparklane/sparklane/internal/fleet"
	"github.com/sparklane/sparklane/internal/testkit/testfleet"
)

// The layered image of dockerdStoppedMidImageTransfer: the engine-sim
// image and layeredLayers more of layerSize each (one file of random
// bytes), the last of them in flight when h3's dockerd stops.
const (
	layeredLayers = 4
	layerSize     = 16 << 20
)

// buildOnH1 builds tag on h1's own dockerd only: FROM the engine-sim
// image, plus one layer per size (a file of random bytes each), from a
// context made here (no registry). It returns the image.
func (f *realFleet) buildOnH1(tag string, sizes ...int) image.InspectResponse {
	f.t.Helper()
	ctx := context.Background()
	d := nodeDocker(f.t, f.tf.Node(1))
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	df := "FROM " + f.image + "\n"
	add := func(name string, b []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(b))}); err != nil {
			f.t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			f.t.Fatal(err)
		}
	}
	for i, size := range sizes {
		b := make([]byte, size)
		if _, err := rand.Read(b); err != nil {
			f.t.Fatal(err)
		}
		name := "layer" + strconv.Itoa(i+1)
		add(name, b)
		df += "COPY " + name + " /" + name + "\n"
	}
	add("Dockerfile", []byte(df))
	if err := tw.Close(); err != nil {
		f.t.Fatal(err)
	}
	resp, err := d.ImageBuild(ctx, &ctxTar, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
	if err != nil {
		f.t.Fatalf("build %s on h1: %v", tag, err)
	}
	err = jsonmessage.DisplayJSONMessagesStream(resp.Body, io.Discard, 0, false, nil)
	resp.Body.Close()
	if err != nil {
		f.t.Fatalf("build %s on h1: %v", tag, err)
	}
	ins, err := d.ImageInspect(ctx, tag)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, n := range f.tf.Nodes()[1:] {
		if _, err := nodeDocker(f.t, n).ImageInspect(ctx, tag); err == nil {
			f.t.Fatalf("%s has %s, built on h1 only", n.Name, tag)
		}
	}
	return ins
}

// laneRecipe writes recipe name: fl-a's (its staged blocks are reused)
// under another name, API port and image.
func (f *realFleet) laneRecipe(name, tag string, port int) {
	f.t.Helper()
	src, err := os.ReadFile(filepath.Join(f.dir, "recipes", "fl-a.toml"))
	if err != nil {
		f.t.Fatal(err)
	}
	body := strings.NewReplacer(`name = "fl-a"`, fmt.Sprintf("name = %q", name), fmt.Sprintf("image = %q", f.image), fmt.Sprintf("image = %q", tag),
		"port = 18100", fmt.Sprintf("port = %d", port), "dist_port = 19100", fmt.Sprintf("dist_port = %d", port+1000)).Replace(string(src))
	if err := os.WriteFile(filepath.Join(f.dir, "recipes", name+".toml"), []byte(body), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// relayOff writes `relay = false` into the fleet's config (once): staging
// reads the NAS on every node, and `fleet install` still issues each
// node's fleet identity, which image transfers need.
func (f *realFleet) relayOff() {
	f.t.Helper()
	b, err := os.ReadFile(f.cfgFile)
	if err != nil {
		f.t.Fatal(err)
	}
	if strings.Contains(string(b), "\nrelay = false\n") {
		return
	}
	s := strings.Replace(string(b), "\nshared_roots = ", "\nrelay = false\nshared_roots = ", 1)
	if err := os.WriteFile(f.cfgFile, []byte(s), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// stopAll stops every lane on the fleet's clusters and checks that no
// lane's container runs on any host.
func (f *realFleet) stopAll() {
	f.t.Helper()
	for _, c := range []string{"fl3", "fl2", "fl1"} {
		f.starter("stop", "--cluster", c) // a cluster with nothing running has nothing to stop
	}
	for _, n := range f.tf.Nodes() {
		cs, err := nodeDocker(f.t, n).ContainerList(context.Background(), container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", contract.LabelLane))})
		if err != nil || len(cs) > 0 {
			f.t.Fatalf("%s still runs %d lane containers after stop (%v)", n.Name, len(cs), err)
		}
	}
}

// relayOffMovesTheImage is TestRealFleet's subtest
// "RelayOffMovesTheImage" (issue 52 item 8): with `relay = false` in the
// config from install on — the nodes' services stopped and their fleet
// identities removed first, as on hosts never installed with the relay
// on — `fleet install` still writes each node's fleet identity, and a
// stage whose image is on h1 only moves it to h2 and h3 (same ID).
func (f *realFleet) relayOffMovesTheImage(t *testing.T) {
	ctx := context.Background()
	f.install()
	f.setRelease(f.tf.Node(3), true)
	f.relayOff()
	l := fleet.DefaultLayout()
	for _, n := range f.tf.Nodes() {
		f.stopService(n)
		if out, err := f.tf.SSH(n, "rm -f "+strings.Join(fleet.FleetIdentityFiles(l.StateDir, n.Name), " ")); err != nil {
			t.Fatalf("remove %s's fleet identity: %v\n%s", n.Name, err, out)
		}
	}
	for _, r := range f.install() {
		if r.Credentials != fleet.Written || r.Run != fleet.Started {
			t.Fatalf("install with relay = false on %s: %+v, want its fleet identity written and the service started", r.Node, r)
		}
	}
	for _, n := range f.tf.Nodes() {
		if out, err := f.tf.SSH(n, "ls "+strings.Join(fleet.FleetIdentityFiles(l.StateDir, n.Name), " ")); err != nil {
			t.Fatalf("%s has no fleet identity after install with relay = false: %v\n%s", n.Name, err, out)
		}
	}
	tag := fmt.Sprintf("sparklane-test/relay-off:%x", time.Now().UnixNano())
	want := f.buildOnH1(tag, 1<<20)
	f.laneRecipe("fl-relay", tag, 18160)
	if code, out, errOut := f.starter("stage", "--lane", "fl-relay"); code != 0 {
		t.Fatalf("stage fl-relay with relay = false: exit %d\n%s\n%s", code, out, errOut)
	}
	// The run's result (`stage --json` prints the blocks only).
	var res contract.StageResult
	if err := f.c.GetWorkflow(ctx, contract.StageID("fl-relay"), "").Get(ctx, &res); err != nil || len(res.Images) != 3 {
		t.Fatalf("stage fl-relay's result: %+v (%v), want the image step on 3 nodes", res, err)
	}
	t.Logf("stage fl-relay with relay = false: images %+v", res.Images)
	for _, n := range f.tf.Nodes()[1:] {
		got, err := nodeDocker(t, n).ImageInspect(ctx, tag)
		if err != nil || got.ID != want.ID {
			t.Fatalf("%s has %s as %q (%v), want %s as on h1", n.Name, tag, got.ID, err, want.ID)
		}
	}
	for _, im := range res.Images[1:] {
		if im.From == "" || im.BytesIn == 0 {
			t.Fatalf("stage's image step with relay = false: %+v, want h2 and h3 to receive", res.Images)
		}
	}
	for _, s := range res.Nodes {
		for _, b := range s.Blocks {
			if b.Result.Relay != nil {
				t.Errorf("%s's block %s used the relay with relay = false: %+v", s.Node, b.Block, b.Result.Relay)
			}
		}
	}
}

// rx is how many bytes host n's eth0 has received (/proc/net/dev in its
// network namespace): the wire, TLS and TCP included.
func (f *realFleet) rx(n *testfleet.Node) int64 {
	f.t.Helper()
	out, err := f.tf.Exec(n, "cat", "/proc/net/dev")
	if err != nil {
		f.t.Fatal(err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		dev, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if ok && dev == "eth0" {
			v, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				f.t.Fatal(err)
			}
			return v
		}
	}
	f.t.Fatalf("%s has no eth0:\n%s", n.Name, out)
	return 0
}

// streamOnce is the size of the image stream node n needs (the layers it
// lacks, sent by h1 as the chain sends them): what a transfer without an
// interruption carries to it.
func (f *realFleet) streamOnce(n *testfleet.Node, img image.InspectResponse, tag string) (size int64, have int) {
	f.t.Helper()
	ctx := context.Background()
	have, _, err := images.HaveLayers(ctx, nodeDocker(f.t, n), n.Name, img.RootFS.Layers)
	if err != nil {
		f.t.Fatal(err)
	}
	cw := &counter{}
	if _, err := images.Send(ctx, nodeDocker(f.t, f.tf.Node(1)), images.Spec{ID: img.ID, DiffIDs: img.RootFS.Layers, From: have, Tag: tag}, cw); err != nil {
		f.t.Fatal(err)
	}
	return cw.n, have
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// imageWaiting waits until workflow id's image step shows that it waits
// for nodeName (the step is the image's, for every node: it names none),
// and returns the step's detail.
func (f *realFleet) imageWaiting(ctx context.Context, id, nodeName string) string {
	f.t.Helper()
	var detail string
	f.until(3*time.Minute, id+"'s image step showing that it waits for "+nodeName, func() bool {
		p, err := f.progress(ctx, id)
		if err != nil || len(p.Waiting) != 1 || p.Waiting[0].Node != nodeName {
			return false
		}
		for _, s := range p.Steps {
			if s.Status == contract.StepWaiting && strings.HasPrefix(s.Name, "image ") && strings.Contains(s.Detail, "waiting for node "+nodeName+" (down ") {
				detail = s.Detail
				return true
			}
		}
		return false
	})
	return detail
}

// dockerdStoppedMidImageTransfer is TestRealFleet's subtest
// "DockerdStoppedMidImageTransfer" (issue 52 item 9): a cutover whose
// image (4 layers of 16 MiB over the engine-sim image) is on h1 only;
// the image fault point holds h3's receive once 4 of its layers are
// durable, h3's dockerd is killed there, and started again 30 s later.
// The image step waits for h3 (its progress says so) and resumes: the
// cutover completes, h3 has the image, and what h3 received in all (its
// eth0) is the image's stream once plus at most the layer in flight —
// the layers Docker had registered are not sent again.
func (f *realFleet) dockerdStoppedMidImageTransfer(t *testing.T) {
	ctx := context.Background()
	h3 := f.tf.Node(3)
	f.install()
	f.relayOff() // staging reads the NAS: h3's eth0 carries the image
	f.stopAll()
	tag := fmt.Sprintf("sparklane-test/layered:%x", time.Now().UnixNano())
	sizes := make([]int, layeredLayers)
	for i := range sizes {
		sizes[i] = layerSize
	}
	img := f.buildOnH1(tag, sizes...)
	if len(img.RootFS.Layers) != f.imageHoldAt+1 {
		t.Fatalf("%s has %d layers; the image fault point holds at %d, want all but the last", tag, len(img.RootFS.Layers), f.imageHoldAt)
	}
	once, have := f.streamOnce(h3, img, tag)
	f.laneRecipe("fl-layers", tag, 18170)
	held, err := f.tf.HostPath(h3, imageHeld)
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(held)
	f.setRelease(h3, false)
	rx0 := f.rx(h3)
	run := f.background("--json", "cutover", "--lane", "fl-layers")
	var mark []byte
	f.until(5*time.Minute, "h3 holding the image transfer at layer "+strconv.Itoa(f.imageHoldAt), func() bool {
		mark, _ = os.ReadFile(held)
		return len(mark) > 0
	})
	if want := fmt.Sprintf("%s %d\n", tag, f.imageHoldAt); string(mark) != want {
		t.Fatalf("image fault point on h3: %q, want %q", mark, want)
	}
	if err := f.tf.StopDocker(h3); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	f.setRelease(h3, true)
	detail := f.imageWaiting(ctx, contract.CutoverID("fl3"), "h3")
	t.Logf("h3's dockerd killed with %d of %d layers durable; the cutover: %q", f.imageHoldAt, len(img.RootFS.Layers), detail)
	// The outage's length is the fault injected, not a synchronisation.
	time.Sleep(time.Until(down.Add(30 * time.Second)))
	if err := f.tf.StartDocker(ctx, h3); err != nil {
		t.Fatal(err)
	}
	r := <-run
	res := decodeCutover(t, r)
	if r[0] != "0" || !res.OK || res.Serve == nil || !res.Serve.Answers {
		t.Fatalf("cutover fl-layers after h3's dockerd was down 30 s: exit %s %+v\n%s", r[0], res, r[2])
	}
	if p, err := f.progress(ctx, contract.CutoverID("fl3")); err != nil || len(p.Waiting) != 0 {
		t.Errorf("the cutover's progress after h3 came back: waiting for %+v (%v), want none", p.Waiting, err)
	}
	got, err := nodeDocker(t, h3).ImageInspect(ctx, tag)
	if err != nil || got.ID != img.ID {
		t.Fatalf("h3 has %s as %q (%v), want %s", tag, got.ID, err, img.ID)
	}
	var h3res contract.ImageNodeResult
	for _, im := range res.Images {
		if im.Node == "h3" {
			h3res = im
		}
	}
	rx := f.rx(h3) - rx0
	resent := rx - once
	t.Logf("MEASURE h3's eth0 received %s over the cutover; the image's stream to it once is %s (%d of %d layers there before); re-sent %s; the resumed transfer carried %s (%d layers); a %s layer was in flight",
		contract.HumanBytes(rx), contract.HumanBytes(once), have, len(img.RootFS.Layers), contract.HumanBytes(max(0, resent)), contract.HumanBytes(h3res.BytesIn), h3res.Layers, contract.HumanBytes(layerSize))
	// TCP/IP and TLS add a few percent on the wire; the control plane's
	// traffic (the tunnel, the lane's probes) stays far below a MiB.
	if limit := (once+layerSize)*21/20 + 2<<20; rx > limit {
		t.Fatalf("h3 received %d bytes for a %d-byte stream: more than the layer in flight (%d) re-sent (limit %d)", rx, once, layerSize, limit)
	}
	if h3res.Layers != 1 || h3res.BytesIn > layerSize+1<<20 {
		t.Fatalf("h3's last transfer %+v: want the one layer above the %d it kept", h3res, f.imageHoldAt)
	}
	f.saveHistory(contract.CutoverID("fl3"), "cutover-image-outage")
	if code, out, errOut := f.starter("stop", "--lane", "fl-layers"); code != 0 {
		t.Fatalf("stop fl-layers: exit %d\n%s\n%s", code, out, errOut)
	}
}
