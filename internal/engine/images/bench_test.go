package images

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/sparklane/sparklane/internal/testkit/testfleet"
)

// tx is how many bytes node's eth0 has sent.
func (fn *fleetNet) tx(name string) int64 {
	out, err := fn.f.Exec(fn.node(name), "cat", "/proc/net/dev")
	if err != nil {
		fn.t.Fatal(err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		dev, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if ok && dev == "eth0" {
			v, err := strconv.ParseInt(strings.Fields(rest)[8], 10, 64)
			if err != nil {
				fn.t.Fatal(err)
			}
			return v
		}
	}
	fn.t.Fatalf("node %s has no eth0", name)
	return 0
}

// sparkrun is sparkrun's method (src/sparkrun/containers/distribute.py):
// on the source node, `docker save IMG | ssh NODE docker load` to each
// target in turn. It returns the wall time and the source's eth0 tx.
func (fn *fleetNet) sparkrun(img string, targets []string) (time.Duration, int64) {
	h1 := fn.node("h1")
	tx0 := fn.tx("h1")
	start := time.Now()
	for _, t := range targets {
		sh := fmt.Sprintf("docker -H unix://%s save %s | ssh -i %s -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o BatchMode=yes root@%s docker -H unix://%s load",
			testfleet.NodeDockerSocket, img, fn.f.IdentityFile(), fn.f.KnownHostsFile(), fn.node(t).IP, testfleet.NodeDockerSocket)
		if out, err := fn.f.Exec(h1, "sh", "-c", sh); err != nil {
			fn.t.Fatalf("sparkrun's method to %s: %v: %s", t, err, out)
		}
	}
	return time.Since(start), fn.tx("h1") - tx0
}

// drop removes img (and its layers no other image holds) from nodes.
func (fn *fleetNet) drop(img string, nodes ...string) {
	for _, n := range nodes {
		if _, err := fn.docker[n].ImageRemove(context.Background(), img, image.RemoveOptions{PruneChildren: true}); err != nil {
			fn.t.Fatalf("%s: remove %s: %v", n, img, err)
		}
	}
}

// BenchmarkImagesVsSparkrun compares, on its own 4-host test fleet with
// one image built on h1 (the source; h2, h3 and h4 the targets) (SPARKLANE_IMAGES_BENCH_MIB, default 256 MiB), the
// chain transfer with sparkrun's `docker save | ssh docker load` to each
// node in turn: wall time and the source's bytes cold, and the bytes per
// node for a new image that adds one 50 MiB layer. scripts/bench-images.sh
// runs it.
func BenchmarkImagesVsSparkrun(b *testing.B) {
	mib := 256
	if v := os.Getenv("SPARKLANE_IMAGES_BENCH_MIB"); v != "" {
		var err error
		if mib, err = strconv.Atoi(v); err != nil {
			b.Fatalf("SPARKLANE_IMAGES_BENCH_MIB=%q: %v", v, err)
		}
	}
	const layer = 50 << 20
	ctx := context.Background()
	fn := newFleetNet(b, "imgbench", 4)
	repo := "sparklane-imgbench/img"
	v1 := fn.build("h1", repo+":v1", "", mib<<20)
	fn.build("h1", repo+":v2", repo+":v1", layer)
	targets := []string{"h2", "h3", "h4"}
	fn.buildLayered(mib)
	ref, ref2 := mustRef(b, repo+":v1"), mustRef(b, repo+":v2")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Cold, sparkrun's method, then the chain.
		spWall, spTx := fn.sparkrun(ref.Name, targets)
		fn.drop(ref.Name, targets...)
		tx0 := fn.tx("h1")
		p, invs, err := fn.plan(ctx, ref)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		fn.transfer(ref, p, invs)
		wall := time.Since(start) // planning included
		tx := fn.tx("h1") - tx0
		size := float64(v1.Size)
		// One 50 MiB layer more: sparkrun's method moves the whole image.
		spWall2, spTx2 := fn.sparkrun(ref2.Name, targets)
		fn.drop(ref2.Name, targets...)
		p2, invs2, err := fn.plan(ctx, ref2)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		_, rx2, _ := fn.transfer(ref2, p2, invs2)
		wall2 := time.Since(start)
		b.Logf("image %d MiB, %d targets (%s) from h1", mib, len(targets), strings.Join(targets, ", "))
		b.Logf("cold: chain %.2fs, sparkrun %.2fs: wall ratio %.2f; source sent %.2fx the image (sparkrun %.2fx)", wall.Seconds(), spWall.Seconds(), wall.Seconds()/spWall.Seconds(), float64(tx)/size, float64(spTx)/size)
		b.Logf("+1 layer of 50 MiB: chain %.2fs (h2 %.2fx, h3 %.2fx, h4 %.2fx the layer on the wire), sparkrun %.2fs (%.2fx the layer per node)",
			wall2.Seconds(), float64(rx2["h2"])/layer, float64(rx2["h3"])/layer, float64(rx2["h4"])/layer, spWall2.Seconds(), float64(spTx2)/float64(len(targets))/layer)
		b.ReportMetric(wall.Seconds()/spWall.Seconds(), "wall-ratio-cold")
		b.ReportMetric(float64(tx)/size, "source-x-image")
		b.ReportMetric(float64(rx2["h2"])/layer, "x-layer-per-node")
		benchLayered(b, fn, mib, targets)
		if i+1 < b.N {
			fn.drop(ref2.Name, targets...)
			fn.drop(ref.Name, targets...)
		}
	}
}

// layeredRepo is the bench's second image: as large, in 8 layers, so that
// every receiver loads it layer by layer (durable.go), the resumable path.
const layeredRepo = "sparklane-imgbench/layered"

// buildLayered builds layeredRepo:l8 on h1: 8 layers of mib/8 MiB.
func (fn *fleetNet) buildLayered(mib int) {
	base := ""
	for k := 1; k <= 8; k++ {
		tag := fmt.Sprintf("%s:l%d", layeredRepo, k)
		fn.build("h1", tag, base, mib<<20/8)
		base = tag
	}
}

// benchLayered moves layeredRepo:l8 cold to targets, sparkrun's method
// then the chain, and logs the wall ratio.
func benchLayered(b *testing.B, fn *fleetNet, mib int, targets []string) {
	ref := mustRef(b, layeredRepo+":l8")
	spWall, _ := fn.sparkrun(ref.Name, targets)
	fn.drop(ref.Name, targets...)
	p, invs, err := fn.plan(context.Background(), ref)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	fn.transfer(ref, p, invs)
	wall := time.Since(start)
	b.Logf("cold, %d MiB in 8 layers (loaded layer by layer): chain %.2fs, sparkrun %.2fs: wall ratio %.2f", mib, wall.Seconds(), spWall.Seconds(), wall.Seconds()/spWall.Seconds())
	b.ReportMetric(wall.Seconds()/spWall.Seconds(), "wall-ratio-cold-8-layers")
	fn.drop(ref.Name, targets...)
}
