package images

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/regtest"
)

// BenchmarkPullVsDockerPull times a pull of one image from a real
// docker-registry on 127.0.0.1 (plain HTTP, which Docker allows on
// loopback without configuration) into this machine's Docker: sparklane's
// registry client (Pull) against `docker pull` of the same reference,
// same data, in the same run, each round alternating which goes first,
// the image removed before each pull. SPARKLANE_PULL_BENCH_MIB sets the
// image's size (default 160, in 4 layers of random bytes, which do not
// compress); scripts/bench-pull.sh runs it.
func BenchmarkPullVsDockerPull(b *testing.B) {
	mib := 160
	if v := os.Getenv("SPARKLANE_PULL_BENCH_MIB"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 4 {
			b.Fatalf("SPARKLANE_PULL_BENCH_MIB=%q: give MiB, at least 4", v)
		}
		mib = n
	}
	ctx := context.Background()
	c := dockerClient(b)
	reg := regtest.Start(b, ctx, regtest.Options{})
	repo := "sparklane-pullbench/img-" + randHex(3)
	img := regtest.Image(b, "", []int{mib << 18, mib << 18, mib << 18, mib << 18})
	reg.Push(b, ctx, repo+":1", img)
	ref := contract.MustImageRef(reg.Host + "/" + repo + ":1")
	drop := func() {
		_, _ = c.ImageRemove(ctx, ref.Name, image.RemoveOptions{PruneChildren: true})
	}
	b.Cleanup(drop)
	ours := func() time.Duration {
		start := time.Now()
		p, err := Pull(ctx, c, PullSpec{Node: "bench", Ref: ref, Registry: ref.Registry()}, PullOptions{})
		if err != nil || p.Layers != 4 {
			b.Fatalf("sparklane pull: %+v %v", p, err)
		}
		return time.Since(start)
	}
	docker := func() time.Duration {
		start := time.Now()
		if out, err := exec.CommandContext(ctx, "docker", "pull", "-q", ref.Name).CombinedOutput(); err != nil {
			b.Fatalf("docker pull: %v: %s", err, out)
		}
		return time.Since(start)
	}
	b.ResetTimer()
	var sum [2]time.Duration
	rounds := 3
	for r := range rounds {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, k := range order {
			drop()
			var d time.Duration
			if k == 0 {
				d = ours()
			} else {
				d = docker()
			}
			sum[k] += d
			fmt.Printf("bench_test: round %d %s: %.2f s\n", r+1, []string{"sparklane", "docker pull"}[k], d.Seconds())
		}
	}
	b.StopTimer()
	s, d := sum[0].Seconds()/float64(rounds), sum[1].Seconds()/float64(rounds)
	fmt.Printf("bench_test: %d MiB in 4 layers from a loopback registry, mean of %d: sparklane %.2f s (%.0f MiB/s), docker pull %.2f s (%.0f MiB/s), ratio %.2fx\n",
		mib, rounds, s, float64(mib)/s, d, float64(mib)/d, s/d)
	b.ReportMetric(s, "sparklane-s")
	b.ReportMetric(d, "dockerpull-s")
	b.ReportMetric(s/d, "ratio")
}
