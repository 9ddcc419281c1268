package itest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
)

// The replay corpus's outage path: a node worker (its own process) is
// killed -9 mid-copy, the stage waits for the node (the versioned
// node-outage-wait branch: NodePolling, timers), the worker comes back,
// the block resumes and verifies. Small data, so it costs seconds; the big
// resume-bytes checks live in durability_test.go and outage_test.go.
func TestReplayCorpusStageResumedAfterNodeOutage(t *testing.T) {
	base := t.TempDir()
	built := buildWorker(t, base)
	nas := writeHub(t, "outage", 8)
	recipe := hubRecipe("small-hub", "duo", "outage", "", nas)
	f := newFleet(t, fleetOptions{nodes: 2, clusters: map[string][]string{"duo": {"n1", "n2"}}, shared: nas, recipes: map[string]string{"small-hub": recipe}})
	f.startControl()
	p := &nodeProc{t: t, bin: built(), cfg: f.cfgFile, node: "n2", log: filepath.Join(base, "worker-n2.log")}
	t.Cleanup(p.stop)
	p.env = []string{fmt.Sprintf("%s=1", testworker.PauseAtEnv)}
	p.start()
	ctx := withTimeout(t, 6*time.Minute)

	run := startStage(ctx, t, f, "small-hub")
	id := contract.StageNodeID("small-hub", "n2")
	hctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	pendingStage(hctx, t, f.env.Client, id, func(p contract.StageProgress) bool { return p.Paused })
	cancel()
	p.kill9()
	if detail := waitForWaiting(ctx, t, f.env.Client, id, "n2"); !strings.Contains(detail, "waiting for node n2") {
		t.Fatalf("waiting step detail %q", detail)
	}
	p.env = nil
	p.start()
	var res contract.StageResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("stage after the node came back: %v (worker log %s)", err, p.log)
	}
	if len(res.Nodes) != 1 || len(res.Nodes[0].Verified) != 1 || !res.Nodes[0].Verified[0].Result.Clean() {
		t.Fatalf("stage result after the outage: %+v", res)
	}
	saveHistory(t, f, contract.StageID("small-hub"), "stage-outage-resumed")
	saveHistory(t, f, id, "stagenode-outage-resumed")
}
