package itest

import (
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
)

// The stage's image step (versionStageImage) through the real server and
// workers: every node is asked for the lane's image first (the demo's
// nodes share this machine's Docker, so it is present everywhere and
// nothing moves), and the run's history joins the replay corpus as
// stage-image (stage-ok keeps the runs recorded before the step); an up
// of the staged lane joins it as serve-image-id.
func TestReplayCorpusStageImage(t *testing.T) {
	f, _ := demoFleet(t, 24<<20)
	ctx := withTimeout(t, 10*time.Minute)
	code, out, errOut := f.starter(ctx, "--json", "stage", "--lane", "demo-2x")
	if code != 0 {
		t.Fatalf("stage: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := activitiesScheduled(t, f, contract.StageID("demo-2x"), "ImageInventory"); n != 2 {
		t.Fatalf("stage asked %d nodes for the image, want 2", n)
	}
	saveHistory(t, f, contract.StageID("demo-2x"), "stage-image")

	// Then up: the serve step's image check resolves each node's image
	// ID (versionServeImageID); the history joins the corpus as
	// serve-image-id (serve-ok keeps the runs recorded before the gate).
	for _, args := range [][]string{{"up", "--lane", "demo-2x"}, {"stop", "--lane", "demo-2x"}} {
		if code, out, errOut := f.starter(ctx, args...); code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errOut)
		}
	}
	saveHistory(t, f, contract.UpID("demo-2x"), "serve-image-id")
}
