package activities

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/demo"
)

// StageBlock with Verify stages a real hub-mirror block and verifies it
// without writing in the same activity, returning the verify; without
// Verify, or in a dry run, it returns none.
func TestStageBlockVerifiesWhatItStaged(t *testing.T) {
	dir := t.TempDir()
	nas, err := demo.GenerateNAS(filepath.Join(dir, "nas"), 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "node")
	if err := os.MkdirAll(filepath.Join(root, "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := &NodeActivities{Node: config.Node{Name: "n1", FSRoot: root, Roots: []string{"/srv"}}, SharedRoots: []string{filepath.Join(dir, "nas")}, Log: zap.NewNop()}
	b := contract.Staging{Kind: "hub-mirror", ID: "weights", Src: nas.Hub, Dst: "/srv/hub", Repos: []string{demo.ModelRepo}, Verify: "sampled"}
	ctx := context.Background()

	out, err := a.StageBlock(ctx, contract.StageBlockInput{Lane: "l", Block: b, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if out.Result.CopiedFiles == 0 || out.Verified == nil {
		t.Fatalf("stage with verify: copied %d files, verified %+v", out.Result.CopiedFiles, out.Verified)
	}
	if v := out.Verified; !v.Result.Clean() || v.Result.OK < out.Result.CopiedFiles || v.Block != "weights" || v.Node != "n1" || v.Lane != "l" {
		t.Fatalf("verify after staging: %+v (copied %d files)", v, out.Result.CopiedFiles)
	}

	out, err = a.StageBlock(ctx, contract.StageBlockInput{Lane: "l", Block: b})
	if err != nil || out.Verified != nil {
		t.Fatalf("stage without verify: %v, verified %+v", err, out.Verified)
	}
	out, err = a.StageBlock(ctx, contract.StageBlockInput{Lane: "l", Block: b, Verify: true, DryRun: true})
	if err != nil || out.Verified != nil {
		t.Fatalf("dry run with verify asked: %v, verified %+v (a dry run verifies nothing)", err, out.Verified)
	}
}
