package hubmirror

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/staging"
)

// benchHub builds a hub of n small linked files (8 KiB) and big files of
// bigSize bytes, for the fast-path benchmarks: many small files are where
// per-file syscalls (the roots boundary, the ledger) show.
func benchHub(b *testing.B, n, big int, bigSize int) (root, hub string) {
	b.Helper()
	root = b.TempDir()
	hub = filepath.Join(root, "nas", "hub")
	t := &testing.T{}
	r := newRepo(t, hub, "org/model")
	for i := 0; i < n; i++ {
		sum := r.blob(testData(uint64(i+1), 8<<10), false)
		r.link(rev1, fmt.Sprintf("d%02d/f%05d.json", i%50, i), sum)
	}
	for i := 0; i < big; i++ {
		sum := r.blob(testData(uint64(100000+i), bigSize), false)
		r.link(rev1, fmt.Sprintf("model-%05d.safetensors", i), sum)
	}
	r.ref("main", rev1)
	if t.Failed() {
		b.Fatal("building the bench hub failed")
	}
	return root, hub
}

// BenchmarkStageSmallFiles stages 2,000 small files into an empty dst.
func BenchmarkStageSmallFiles(b *testing.B) {
	root, hub := benchHub(b, 2000, 0, 0)
	stageFresh(b, root, hub)
}

// BenchmarkSecondPass re-verifies a staged tree of 2,000 small files and
// 4 × 16 MiB: the pass every cutover makes, copying nothing.
func BenchmarkSecondPass(b *testing.B) {
	secondPasses(b, 2000, 4, 16<<20, 0)
}

// secondPasses stages a hub of small and big files once, then times b.N
// second passes, each copying nothing and (with maxRead > 0) reading at
// most maxRead bytes of the NAS.
func secondPasses(b *testing.B, small, big, bigSize int, maxRead int64) {
	root, hub := benchHub(b, small, big, bigSize)
	sp := Spec{Src: hub, Dst: filepath.Join(root, "node"), Repos: []string{"org/model"}, Roots: []string{root}}
	if _, err := Stage(context.Background(), sp, staging.Options{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := Stage(context.Background(), sp, staging.Options{})
		if err != nil || res.CopiedFiles != 0 || (maxRead > 0 && res.NASRead > maxRead) {
			b.Fatalf("second pass: %+v %v", res, err)
		}
	}
}

// BenchmarkSealedSecondPass is BenchmarkSecondPass over 5,000 small files
// sealed by the first pass (as on a node's local disk, where a first pass
// seals what it proved): what scripts/bench-hubmirror.sh's small tree
// measures against rsync, without the process start.
func BenchmarkSealedSecondPass(b *testing.B) {
	old := sealClock
	sealClock = func() time.Time { return time.Now().Add(time.Hour) }
	defer func() { sealClock = old }()
	secondPasses(b, 5000, 0, 0, 1<<10)
}

// BenchmarkStageBigFiles stages 4 × 64 MiB into an empty dst (chunked copy,
// fdatasync per chunk).
func BenchmarkStageBigFiles(b *testing.B) {
	root, hub := benchHub(b, 0, 4, 64<<20)
	b.SetBytes(4 * 64 << 20)
	stageFresh(b, root, hub)
}

// stageFresh times b.N stages of hub into a new dst under root each,
// removing each dst outside the timer.
func stageFresh(b *testing.B, root, hub string) {
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(root, "node", fmt.Sprint(i))
		if _, err := Stage(context.Background(), Spec{Src: hub, Dst: dst, Repos: []string{"org/model"}, Roots: []string{root}}, staging.Options{}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(dst)
		b.StartTimer()
	}
}
