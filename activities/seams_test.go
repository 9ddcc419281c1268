package activities

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
)

// stageFixture is a node with a real hub-mirror block to stage.
func stageFixture(t *testing.T, seams *Seams) (*NodeActivities, contract.StageBlockInput) {
	t.Helper()
	dir := t.TempDir()
	nas, err := demo.GenerateNAS(filepath.Join(dir, "nas"), 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "node")
	if err := os.MkdirAll(filepath.Join(root, "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := &NodeActivities{Node: config.Node{Name: "n1", FSRoot: root, Roots: []string{"/srv"}}, SharedRoots: []string{filepath.Join(dir, "nas")}, Log: zap.NewNop(), Seams: seams}
	b := contract.Staging{Kind: "hub-mirror", ID: "weights", Src: nas.Hub, Dst: "/srv/hub", Repos: []string{demo.ModelRepo}, Verify: "sampled"}
	return a, contract.StageBlockInput{Lane: "l", Block: b}
}

// The StageHold seam holds a real staging pass where it says, once: the
// pass does not end while the seam's channel is open, the seam is asked
// nothing more after it held, and the pass completes once released.
func TestStageHoldSeamHoldsThePassOnce(t *testing.T) {
	release := make(chan struct{})
	heldAt := make(chan contract.StageProgress, 1)
	var calls atomic.Int32
	a, in := stageFixture(t, &Seams{StageHold: func(_ context.Context, lane, block string, p contract.StageProgress) <-chan struct{} {
		calls.Add(1)
		if lane != "l" || block != "weights" || p.BytesDone == 0 {
			return nil
		}
		heldAt <- p
		return release
	}})
	done := make(chan error, 1)
	var out contract.StageBlockResult
	go func() {
		var err error
		out, err = a.StageBlock(context.Background(), in)
		done <- err
	}()
	p := <-heldAt
	select {
	case err := <-done:
		t.Fatalf("the pass ended (%v) while its seam held it", err)
	default:
	}
	n := calls.Load()
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if calls.Load() != n {
		t.Errorf("the seam was asked %d more times after it held the pass; a pass holds once", calls.Load()-n)
	}
	if out.Result.CopiedBytes == 0 || out.Result.CopiedBytes < p.BytesDone {
		t.Errorf("held at %d bytes, copied %d in all", p.BytesDone, out.Result.CopiedBytes)
	}
}

// A held pass still sees its activity's end: cancelled while held, it
// fails rather than hang.
func TestStageHoldSeamLetsACancelThrough(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	held := make(chan struct{})
	a, in := stageFixture(t, &Seams{StageHold: func(context.Context, string, string, contract.StageProgress) <-chan struct{} {
		select {
		case <-held:
		default:
			close(held)
		}
		return make(chan struct{}) // never released
	}})
	done := make(chan error, 1)
	go func() {
		_, err := a.StageBlock(ctx, in)
		done <- err
	}()
	<-held
	cancel()
	if err := <-done; err == nil || !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "canceled") {
		t.Fatalf("a cancelled held pass: %v, want it cancelled", err)
	}
}

// FetchProgress sees the bytes of a real fetch as they arrive, up to all
// of them.
func TestFetchProgressSeamSeesTheBytes(t *testing.T) {
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	s.AddRepo(hubtest.Repo{ID: "org/m", Files: []hubtest.File{{Path: "w.bin", Size: 3 << 20, Seed: 3, LFS: true}}})
	var last atomic.Int64
	a := &FetchActivities{Where: "control", Log: zap.NewNop(), Seams: &Seams{FetchProgress: func(_ context.Context, repo string, n int64) {
		if repo == "org/m" {
			last.Store(n)
		}
	}}}
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", filepath.Join(t.TempDir(), "none"))
	r, err := a.FetchRepo(context.Background(), contract.FetchRepoInput{Lane: "l", Repo: contract.FetchRepo{Block: "w", Repo: "org/m", Revision: "main", CacheDir: t.TempDir()}, Endpoint: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	if last.Load() != r.DownloadedBytes || r.DownloadedBytes < 3<<20 {
		t.Fatalf("the seam last saw %d bytes; the fetch downloaded %d", last.Load(), r.DownloadedBytes)
	}
}

// The BootID seam's answer is the node's boot id; an empty answer (and no
// seam) is the kernel's.
func TestBootIDSeam(t *testing.T) {
	kernel, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	a := &NodeActivities{Node: config.Node{Name: "n2"}}
	if got := a.bootID(); got != strings.TrimSpace(string(kernel)) {
		t.Fatalf("no seam: %q, want the kernel's %q", got, kernel)
	}
	a.Seams = &Seams{BootID: func(node string) string {
		if node == "n2" {
			return "boot-2"
		}
		return ""
	}}
	if got := a.bootID(); got != "boot-2" {
		t.Fatalf("seam: %q, want boot-2", got)
	}
	a.Node.Name = "n3"
	if got := a.bootID(); got != strings.TrimSpace(string(kernel)) {
		t.Fatalf("seam answering nothing: %q, want the kernel's", got)
	}
}
