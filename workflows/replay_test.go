package workflows

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
)

// replayed is every workflow type the control worker registers: each must
// have at least one committed history, so a new type cannot ship without
// one.
var replayed = []any{FleetProbe, StageNode, Stage, Verify, Serve, Probe, Stop, Cutover, Bench, Power, NodeLease, Disk, Keeper, Fetch}

// corpus are the histories that must be there: every workflow type and its
// failure paths, recorded through the real server by internal/suites/itest.
var corpus = map[string]string{
	// Dry runs that complete with what would stop a real run
	// (versionDryRunCompletes): a stage with its fetch child, a node
	// whose block is not on the NAS yet, a fetch the Hub refuses.
	"stage-dry-run":         "TestDryRunsTellTheTruthAndLeaveNoFailedWorkflow",
	"stagenode-dry-run":     "TestDryRunsTellTheTruthAndLeaveNoFailedWorkflow",
	"fetch-dry-run-refused": "TestDryRunsTellTheTruthAndLeaveNoFailedWorkflow",
	"cutover-ok":            "TestCutoverServesRollsBackAndStops",
	// starter disk and disk prune (least recently served first).
	"disk-list":  "TestDiskListsAndPrunesStagedBlocksOnLoopFS",
	"disk-prune": "TestDiskListsAndPrunesStagedBlocksOnLoopFS",
	// ... disk-prune recorded before the prune held node leases
	// (versionNodeLease), disk-prune-leased after: both must replay.
	"disk-prune-leased":   "TestDiskListsAndPrunesStagedBlocksOnLoopFS",
	"cutover-rolled-back": "TestCutoverServesRollsBackAndStops",
	"cutover-bench":       "TestReplayCorpusEveryWorkflowType",
	"cutover-cancelled":   "TestReplayCorpusEveryWorkflowType",
	"fleetprobe-ok":       "TestReplayCorpusEveryWorkflowType",
	"stage-ok":            "TestReplayCorpusEveryWorkflowType",
	"stagenode-ok":        "TestReplayCorpusEveryWorkflowType",
	// ... stagenode-ok recorded before versionStageVerifyInBlock (a
	// VerifyBlock after the blocks), this one after (the verify inside
	// each StageBlock): both must replay.
	"stagenode-verify-in-block": "TestReplayCorpusEveryWorkflowType",
	"verify-clean":              "TestReplayCorpusEveryWorkflowType",
	"verify-drift":              "TestReplayCorpusEveryWorkflowType",
	"serve-ok":                  "TestReplayCorpusEveryWorkflowType",
	"probe-ok":                  "TestReplayCorpusEveryWorkflowType",
	"bench-ok":                  "TestReplayCorpusEveryWorkflowType",
	"stop-ok":                   "TestReplayCorpusEveryWorkflowType",
	"stage-outage-resumed":      "TestReplayCorpusStageResumedAfterNodeOutage",
	// ... stage-ok recorded before versionStageImage, this one with the
	// image step (every node asked for the lane's image first).
	"stage-image": "TestReplayCorpusStageImage",
	// ... and an up whose image step resolved each node's image ID
	// (versionServeImageID; serve-ok keeps the runs before the gate).
	"serve-image-id":           "TestReplayCorpusStageImage",
	"stagenode-outage-resumed": "TestReplayCorpusStageResumedAfterNodeOutage",
	"power-off-forced":         "TestReplayCorpusPower",
	"power-on-refused":         "TestReplayCorpusPower",
	// One mutating run per node (versionNodeLease): a cutover refused a
	// node another cluster's cutover holds, a stage holding its nodes, and
	// a node lease.
	"cutover-node-held": "TestOverlappingClustersOneMutatingRunPerNode",
	"stage-node-leases": "TestOverlappingClustersOneMutatingRunPerNode",
	"nodelease-ok":      "TestOverlappingClustersOneMutatingRunPerNode",
	// ... and the holder cancelled mid-stage, rolled back under its leases.
	"cutover-cancelled-node-leases": "TestOverlappingClustersOneMutatingRunPerNode",
	// Serve waiting for a node service that was down (versionServeOutageWait).
	"serve-outage-resumed": "TestRealFleet ./internal/suites/fleete2e",
	// A cutover whose node service stopped mid-pack for 90 s (stage
	// resumed; the serve and verify wait gates' markers).
	"cutover-node-outage-resumed": "TestRealFleet ./internal/suites/fleete2e",
	// A cutover whose image step waited for a node's Docker, killed for
	// 30 s mid-transfer with all but the image's last layer loaded there,
	// and planned the transfer again above them (versionImageOutageWait).
	"cutover-image-outage": "TestRealFleet ./internal/suites/fleete2e",
	// The keeper (versionKeeper): a cutover that starts keeper/CLUSTER, a
	// keeper that re-probed, restarted a killed rank's lane and was ended
	// by a stop (which ended it first), and one that stopped a crash loop.
	"cutover-starts-keeper":  "TestKeeperRestartsAKilledRank",
	"keeper-restart-stopped": "TestKeeperRestartsAKilledRank",
	"stop-ends-keeper":       "TestKeeperRestartsAKilledRank",
	"keeper-crash-loop":      "TestKeeperStopsACrashLoop",
	// ... and a stop that won over a heal waiting for the lane to be ready.
	"keeper-stopped-while-healing": "TestKeeperStopWinsWhileHealing",
	// ... and (versionKeeperNodes) one that waited for a rebooted node,
	// verified it and restarted the lane, then stopped healing past the
	// outage budget (notify) and brought the lane back when it returned.
	"keeper-node-reboot-lost": "TestKeeperWaitsForARebootedNode",
	// ... one that idled off by schedule while a node was powered off and
	// brought the lane back after power on, and the up that started it.
	"keeper-off-by-schedule": "TestKeeperIdlesOffBySchedule",
	"up-starts-keeper":       "TestKeeperIdlesOffBySchedule",
	// ... a restart whose check did not wait for the head's re-probe
	// once a rank was found down (versionKeeperFastDown; recorded by
	// TestKeeperRestartsAKilledRank before versionKeeperRankDied), and one
	// checked at once on the node worker's rank-died signal.
	"keeper-fast-restart":      "TestKeeperRestartsAKilledRank",
	"keeper-rank-died-restart": "TestKeeperRestartsAKilledRank",
	// ... and a keeper's quiet checks with the head's check a local
	// activity (versionKeeperLocalHead), ended by a stop.
	"keeper-quiet-checks": "TestKeeperCheckCost",
	// ... and restarts woken by rank-died on local nodes, whose checks
	// asked each node once (versionKeeperSignalNoReprobe) and the ranks
	// first (versionKeeperSignalRanksFirst), one of them waiting for a
	// node worker that was away.
	"keeper-signal-fast-restart": "TestKeeperSignaledCheckOnLocalNodes",
	// starter fetch (Fetch), and stage --fetch of a lane whose repo was
	// not on the NAS: the Fetch child first (versionStageFetch).
	"fetch-ok":    "TestStarterFetchAndStageFetch",
	"stage-fetch": "TestStarterFetchAndStageFetch",
	// Post hooks (versionPostHooks): post_exec, post_commands and
	// stop_after_post after ready, and a failing post_exec rolled back.
	"cutover-post-hooks":       "TestPostHooksRunAndStopAfterPost",
	"cutover-post-exec-failed": "TestPostHooksRunAndStopAfterPost",
	// cutover --fetch of a lane whose repo was not on the NAS
	// (versionCutoverFetch).
	"cutover-fetch": "TestCutoverFetchOfAnAbsentRepo",
	// a cutover that built its image on no node from [build]
	// (versionStageBuild), and one that pulled it from image_registry on
	// the head through its Docker, reading the auth file there
	// (versionStageRegistry; recorded by the test's former version, kept
	// to prove that branch); one that pulled it from the registry its name
	// carries with the login handed to the head for the pull alone
	// (versionPullCredentials).
	"cutover-build":          "TestCutoverBuildsAnImageOnNoNode",
	"cutover-registry":       "TestCutoverPullsAnImageFromItsOwnRegistry",
	"cutover-registry-login": "TestCutoverPullsAnImageFromItsOwnRegistry",
	// Stage ahead (versionStageAhead): the next lane staged and verified
	// while the previous one served, then the stop; a stage that failed
	// ahead (the previous lane never stopped, its keeper released); and a
	// node without room beside the running lane, staged after the stop.
	"cutover-stage-ahead":        "TestCutoverStagesAheadWhileTheServingLaneAnswers",
	"cutover-stage-ahead-failed": "TestCutoverStagesAheadWhileTheServingLaneAnswers",
	"cutover-stage-after-stop":   "TestCutoverStagesAheadWhileTheServingLaneAnswers",
	// The gateway's steps (versionGateway), through a real gateway
	// process: a cutover staged ahead that held the cluster's names,
	// drained the previous lane and released to the new one after its
	// probe; one whose lane failed to start, routed back to the previous
	// lane and released; a keeper that held the names through a heal and
	// released after its probe; a stop that drained first.
	"cutover-gateway":          "TestGatewayThroughSwitchesHealsAndRestarts",
	"cutover-gateway-rollback": "TestGatewayThroughSwitchesHealsAndRestarts",
	"keeper-gateway-heal":      "TestGatewayThroughSwitchesHealsAndRestarts",
	"stop-gateway-drain":       "TestGatewayThroughSwitchesHealsAndRestarts",
}

// Committed histories of real runs must replay against the current code: a
// change to a workflow's command sequence without workflow.GetVersion
// fails here instead of breaking runs in flight (see versions.go).
func TestReplayCommittedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, f := range files {
		have[strings.TrimSuffix(filepath.Base(f), ".json")] = true
	}
	for name, test := range corpus {
		if !have[name] {
			// A corpus entry is "TEST" (in internal/suites/itest) or "TEST PACKAGE".
			run, pkg, ok := strings.Cut(test, " ")
			if !ok {
				pkg = "./internal/suites/itest"
			}
			t.Errorf("history %s.json is missing from testdata/histories: record it with SPARKLANE_WRITE_HISTORIES=1 go test -count=1 -run %s %s", name, run, pkg)
		}
	}
	types := map[string]bool{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			fh, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			h, err := client.HistoryFromJSON(fh, client.HistoryJSONOptions{})
			fh.Close()
			if err != nil || len(h.GetEvents()) == 0 {
				t.Fatalf("history %s unreadable or empty: %v", f, err)
			}
			types[h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowType().GetName()] = true
			r := worker.NewWorkflowReplayer()
			for _, wf := range replayed {
				r.RegisterWorkflow(wf)
			}
			if err := r.ReplayWorkflowHistory(nil, h); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
	var missing []string
	for _, wf := range replayed {
		name := runtime.FuncForPC(reflectPC(wf)).Name()
		name = name[strings.LastIndex(name, ".")+1:]
		if !types[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("no committed history for workflow type(s) %s: add a run to the corpus in internal/suites/itest/history_corpus_test.go", strings.Join(missing, ", "))
	}
}

func reflectPC(fn any) uintptr { return reflect.ValueOf(fn).Pointer() }
