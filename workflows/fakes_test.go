package workflows

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// fakeFleet is a test double of a whole fleet: every node and control
// activity is mocked by name in a testsuite environment (no GPUs, relays or
// node workers here), records which node ran it, in order, and answers from
// the fields below that each test sets before running its workflow.
type fakeFleet struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment

	mu     sync.Mutex
	calls  []string
	starts []contract.StartRankInput

	// NodeStatus / CheckSSH.
	lanesOn    map[string][]string // node -> lanes running there
	notPolling map[string]bool     // node -> schedule-to-start timeout
	// offOnPurpose: node -> why it is off (relay off, powered down by
	// sparklane), as NodeOff answers.
	offOnPurpose map[string]string
	sshOff       map[string]string // node -> relay-off reason
	sshDown      map[string]string // node -> ssh failure reason
	local        map[string]bool
	// ResolveLane.
	resolve    map[string]contract.ResolveLaneResult
	resolveErr map[string]error
	// Staging.
	verifyBad map[string][]string // "lane/block@node" -> bad files
	// noVerifyInBlock: StageBlock ignores StageBlockInput.Verify, as a
	// node worker older than versionStageVerifyInBlock does.
	noVerifyInBlock bool
	stageErr        map[string]error // "lane/block@node"
	// Serve.
	startErr map[string]error // "lane@node"
	// startDelay holds StartRank on a node for real time before it
	// returns (and is recorded), like a slow container create.
	startDelay map[string]time.Duration
	readyErr   map[string]error // lane
	// postErr fails the post hooks: "PostExec" or "PostCommands".
	postErr map[string]error
	// readyDelay delays the first WaitReady call on the workflow clock.
	readyDelay time.Duration
	readyCalls int
	// Power.
	shutdownErr, unreachErr, relayOffErr error
	// powerErrs fails one power step of one target: "PowerShutdown sw1".
	powerErrs map[string]error
	// gone: node -> how many more of its EnsureImage/StartRank/StopLane
	// calls find no worker (pickup timeout); polls counts NodePolling
	// questions per node.
	gone  map[string]int
	polls map[string]int
	// verifyGone is gone for VerifyBlock calls only.
	verifyGone map[string]int
	// onCall, when set, sees every recorded call as it happens.
	onCall func(label string)
	// Keeper: rankDown/headDown count how many more CheckRanks (per node)
	// and CheckHead calls fail; keeperCalls are EndKeepers/StartKeeper
	// calls (kept out of calls: most tests do not look at keepers), and
	// endKeepers what EndKeepers answers.
	rankDown    map[string]int
	checkErr    error // every CheckRanks fails with it
	headDown    int
	keeperCalls []string
	endKeepers  []contract.KeeperStatus
	started     []contract.KeeperInput
	// imageLack: node → how many of the image's 2 layers it has, for
	// nodes that lack the image (every other node has every image).
	imageLack map[string]int
	// imageSent: TransferImage inputs, by node.
	imageSent map[string]contract.TransferImageInput
	// imageAsked: ImageInventory calls, by node.
	imageAsked map[string]int
	// imageStale: nodes whose image under the tag is an older build.
	imageStale map[string]bool
	// imageFail: a node whose next TransferImage fails (its worker
	// stopped) keeping that many layers loaded; with imageResume, a
	// receiver that succeeds has the image from then on.
	imageFail   map[string]int
	imageResume bool
	// imageGoneMid: a node whose next TransferImage calls fail that many
	// times as a node gone mid-stream (a heartbeat timeout), keeping one
	// more layer each time; dockerDown: inventories that find the node's
	// Docker not answering (DockerUnreachable) that many times.
	imageGoneMid map[string]int
	dockerDown   map[string]int
	// roomShort: nodes whose StageRoom says the lane does not fit beside
	// what runs there (the shortfall).
	roomShort map[string]string
	// roomAfterStop: nodes short of room that have it once the serving
	// lane stops (--make-room prunes its blocks).
	roomAfterStop map[string]bool
	// imageUnpinned: node → the ID its EnsureImage reports for a pinned
	// image it has only under its tag (EnsureImageInput.Resolve).
	imageUnpinned map[string]string
	// Gateway (gateway_test.go): routes are GatewayRoute inputs, in order;
	// gatewayErr fails a gateway activity by name ("GatewayDrain").
	routes     []contract.GatewayRoute
	gatewayErr map[string]error
}

func newFakeFleet(t *testing.T) *fakeFleet {
	var s testsuite.WorkflowTestSuite
	f := &fakeFleet{
		t: t, env: s.NewTestWorkflowEnvironment(),
		lanesOn: map[string][]string{}, notPolling: map[string]bool{}, sshOff: map[string]string{}, sshDown: map[string]string{},
		local: map[string]bool{}, resolve: map[string]contract.ResolveLaneResult{}, resolveErr: map[string]error{},
		verifyBad: map[string][]string{}, stageErr: map[string]error{}, startErr: map[string]error{}, startDelay: map[string]time.Duration{}, readyErr: map[string]error{},
		gone: map[string]int{}, polls: map[string]int{}, verifyGone: map[string]int{}, rankDown: map[string]int{}, postErr: map[string]error{},
	}
	env := f.env
	env.RegisterActivity(&activities.NodeActivities{})
	env.RegisterActivity(&activities.ControlActivities{})
	env.RegisterActivity(&activities.FetchActivities{})
	env.RegisterWorkflow(FleetProbe)
	env.RegisterWorkflow(StageNode)
	env.RegisterWorkflow(NodeLease)
	f.mockProbe()
	f.mockStaging()
	f.mockServe()
	f.mockLaneProbe()
	f.mockPower()
	f.mockKeeper()
	f.mockImages()
	f.mockGateway()
	return f
}

// mockKeeper mocks the keeper's checks and the keepers' start and end.
func (f *fakeFleet) mockKeeper() {
	env := f.env
	env.OnActivity("CheckRanks", any2...).Return(func(ctx context.Context, in contract.CheckRanksInput) (contract.CheckRanksResult, error) {
		if err := f.goneErr(ctx); err != nil {
			return contract.CheckRanksResult{}, err
		}
		n := f.record(ctx, "CheckRanks "+in.Lane)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.checkErr != nil {
			return contract.CheckRanksResult{}, f.checkErr
		}
		if f.rankDown[n] > 0 {
			f.rankDown[n]--
			return contract.CheckRanksResult{Node: n}, temporal.NewApplicationError(fmt.Sprintf("lane %s on node %s: rank exited, exit code 137", in.Lane, n), contract.RankDown)
		}
		return contract.CheckRanksResult{Node: n}, nil
	})
	env.OnActivity("CheckHead", any2...).Return(func(ctx context.Context, in contract.CheckHeadInput) (contract.CheckHeadResult, error) {
		f.record(ctx, "CheckHead "+in.Lane+" "+in.Path)
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.headDown > 0 {
			f.headDown--
			return contract.CheckHeadResult{}, temporal.NewApplicationError("lane "+in.Lane+": head does not answer", contract.LaneDown)
		}
		return contract.CheckHeadResult{Status: 200}, nil
	})
	env.OnActivity("KeeperMark", any2...).Return(func(ctx context.Context, in contract.KeeperMarkInput) error {
		label := "KeeperMark"
		if in.Restart {
			label += " restart"
		}
		if in.Up != nil {
			label += fmt.Sprintf(" up=%v", *in.Up)
		}
		f.record(ctx, label)
		return nil
	})
	env.OnActivity("KeeperNotify", any2...).Return(func(ctx context.Context, in contract.KeeperNotifyInput) (contract.KeeperNotifyResult, error) {
		f.record(ctx, "KeeperNotify "+in.State)
		return contract.KeeperNotifyResult{Notified: "command"}, nil
	})
	f.mockKeeperLifecycle()
}

// mockKeeperLifecycle mocks the keepers' start and end (recorded in
// keeperCalls).
func (f *fakeFleet) mockKeeperLifecycle() {
	env := f.env
	env.OnActivity("EndKeepers", any2...).Return(func(ctx context.Context, in contract.EndKeepersInput) (contract.EndKeepersResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if in.Action != "" && in.Action != contract.KeepEnd {
			f.keeperCalls = append(f.keeperCalls, fmt.Sprintf("EndKeepers %s %s by=%s", in.Action, strings.Join(in.Nodes, ","), in.By))
			return contract.EndKeepersResult{Ended: f.endKeepers}, nil
		}
		f.keeperCalls = append(f.keeperCalls, fmt.Sprintf("EndKeepers %s lane=%s by=%s", strings.Join(in.Nodes, ","), in.Lane, in.By))
		return contract.EndKeepersResult{Ended: f.endKeepers}, nil
	})
	env.OnActivity("StartKeeper", any2...).Return(func(ctx context.Context, in contract.KeeperInput) (contract.StartKeeperResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.keeperCalls = append(f.keeperCalls, "StartKeeper "+in.Cluster+" "+in.Plan.Lane+" by="+in.StartedBy)
		f.started = append(f.started, in)
		return contract.StartKeeperResult{WorkflowID: KeeperID(in.Cluster)}, nil
	})
}

// mockImages mocks ImageInventory (not recorded: every run asks it) and
// TransferImage (recorded).
func (f *fakeFleet) mockImages() {
	f.imageLack, f.imageSent, f.imageAsked, f.imageStale = map[string]int{}, map[string]contract.TransferImageInput{}, map[string]int{}, map[string]bool{}
	f.imageFail, f.imageGoneMid, f.dockerDown, f.roomShort = map[string]int{}, map[string]int{}, map[string]int{}, map[string]string{}
	f.roomAfterStop = map[string]bool{}
	f.env.OnActivity("ImageInventory", any2...).Return(f.imageInventory)
	f.env.OnActivity("BuildImage", any2...).Return(func(ctx context.Context, in contract.BuildImageInput) (contract.BuildImageResult, error) {
		n := f.record(ctx, "BuildImage "+in.Image.String())
		f.mu.Lock()
		delete(f.imageLack, n) // built: the node has it now
		f.mu.Unlock()
		f.mu.Lock()
		delete(f.imageStale, n)
		f.mu.Unlock()
		return contract.BuildImageResult{Node: n, ID: "sha256:" + in.Image.String(), Tail: []string{"Successfully built"}}, nil
	})
	f.env.OnActivity("TransferImage", any2...).Return(f.transferImage)
	f.env.OnActivity("StageRoom", any2...).Return(func(ctx context.Context, in contract.StageRoomInput) (contract.StageRoomResult, error) {
		n := f.record(ctx, "StageRoom "+in.Lane)
		f.mu.Lock()
		defer f.mu.Unlock()
		r := contract.StageRoomResult{Node: n, Running: f.lanesOn[n], OK: f.roomShort[n] == "", AfterStop: f.roomShort[n] == "" || f.roomAfterStop[n]}
		if !r.OK {
			r.Why = n + ": " + f.roomShort[n]
		}
		return r, nil
	})
}

// imageInventory is the double of ImageInventory: a node lacks the image
// (imageLack: how many of its layers it has), has a stale one under the
// tag (imageStale), or has it.
func (f *fakeFleet) imageInventory(ctx context.Context, in contract.ImageInventoryInput) (contract.ImageInventoryResult, error) {
	layers := []string{"sha256:l1", "sha256:l2"}
	if err := f.goneErr(ctx); err != nil {
		return contract.ImageInventoryResult{}, err
	}
	n := strings.TrimPrefix(activity.GetInfo(ctx).TaskQueue, "node.")
	f.mu.Lock()
	have, lacks := f.imageLack[n]
	f.imageAsked[n]++
	down := f.dockerDown[n] > 0
	if down {
		f.dockerDown[n]--
	}
	f.mu.Unlock()
	if down {
		return contract.ImageInventoryResult{}, temporal.NewApplicationError("node "+n+": Cannot connect to the Docker daemon", contract.DockerUnreachable)
	}
	r := contract.ImageInventoryResult{Addr: n + ":7291"}
	r.Node = n
	if lacks {
		if len(in.DiffIDs) > 0 {
			r.HaveLayers = have
		}
		return r, nil
	}
	r.Present, r.ID, r.DiffIDs = true, "sha256:"+in.Image.String(), layers
	if f.imageStale[n] {
		r.ID = "sha256:old-" + in.Image.String()
	}
	if in.Want != "" && r.ID != in.Want {
		// A stale image under the tag: lacks the one moved, has its base.
		r = contract.ImageInventoryResult{Addr: r.Addr}
		r.Node = n
		if len(in.DiffIDs) > 0 {
			r.HaveLayers = 1
		}
	}
	return r, nil
}

// transferImage is the double of TransferImage (recorded): a node in
// imageFail fails once, keeping the layers it had.
func (f *fakeFleet) transferImage(ctx context.Context, in contract.TransferImageInput) (contract.TransferImageResult, error) {
	n := f.record(ctx, "TransferImage "+in.Spec.Tag)
	f.mu.Lock()
	f.imageSent[n] = in
	keep, fail := f.imageFail[n]
	goneMid := f.imageGoneMid[n] > 0
	switch {
	case fail:
		delete(f.imageFail, n)
		f.imageLack[n] = keep
	case goneMid:
		f.imageGoneMid[n]--
		f.imageLack[n] = min(in.Spec.From+1, len(in.Spec.DiffIDs)-1) // it loaded a layer more
	case f.imageResume && in.Upstream != "":
		delete(f.imageLack, n)
	}
	f.mu.Unlock()
	r := contract.TransferImageResult{}
	r.Node = n
	if fail {
		return r, temporal.NewApplicationError("node "+n+": image transfer: worker stopped", "Transient")
	}
	if goneMid {
		return r, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
	}
	if in.Upstream != "" {
		r.BytesIn, r.Layers = 1000, len(in.Spec.DiffIDs)-in.Spec.From
	}
	if in.Downstream != "" {
		r.BytesOut = 1000
	}
	return r, nil
}

// any2 matches any activity context and input.
var any2 = []any{mock.Anything, mock.Anything}

// mockProbe mocks the fleet probe's and the resolver's activities.
func (f *fakeFleet) mockProbe() {
	env := f.env
	env.OnActivity("CheckSSH", any2...).Return(func(ctx context.Context, in contract.SSHCheckInput) (contract.SSHCheckResult, error) {
		f.record(ctx, "CheckSSH "+in.Node)
		r := contract.SSHCheckResult{Node: in.Node, Reachable: true, Local: f.local[in.Node]}
		if why, ok := f.sshOff[in.Node]; ok {
			r.Reachable, r.Off, r.Why = false, true, why
		}
		if why, ok := f.sshDown[in.Node]; ok {
			r.Reachable, r.Why = false, why
		}
		return r, nil
	})
	env.OnActivity("NodeStatus", any2...).Return(func(ctx context.Context, _ contract.NodeStatusInput) (contract.NodeStatusResult, error) {
		n := f.record(ctx, "NodeStatus")
		if f.notPolling[n] {
			return contract.NodeStatusResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
		}
		return contract.NodeStatusResult{Node: n, Lanes: f.lanesOn[n], Roots: []contract.RootFree{{Root: "/srv", Free: 1 << 40}}, MemTotal: 128e9}, nil
	})
	env.OnActivity("ResolveLane", any2...).Return(func(ctx context.Context, in contract.ResolveLaneInput) (contract.ResolveLaneResult, error) {
		f.record(ctx, "ResolveLane "+in.Lane)
		if err := f.resolveErr[in.Lane]; err != nil {
			return contract.ResolveLaneResult{}, err
		}
		r, ok := f.resolve[in.Lane]
		if !ok {
			return r, temporal.NewNonRetryableApplicationError("no recipe for lane "+in.Lane, "InvalidSpec", nil)
		}
		return r, nil
	})
	env.OnActivity("NodePolling", any2...).Return(func(ctx context.Context, in contract.NodePollingInput) (contract.NodePollingResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.polls[in.Node]++
		// A gone node seems back at every third question (its worker
		// polled, then the re-run pickup timed out again while gone lasts).
		return contract.NodePollingResult{Node: in.Node, Polling: f.gone[in.Node]+f.verifyGone[in.Node] == 0 || f.polls[in.Node]%3 == 0}, nil
	})
}

// mockStaging mocks StageBlock and VerifyBlock.
func (f *fakeFleet) mockStaging() {
	env := f.env
	env.OnActivity("StageBlock", any2...).Return(func(ctx context.Context, in contract.StageBlockInput) (contract.StageBlockResult, error) {
		label := "StageBlock " + in.Lane + "/" + in.Block.ID
		if in.Force {
			label += " force"
		}
		n := f.record(ctx, label)
		if err := f.stageErr[in.Lane+"/"+in.Block.ID+"@"+n]; err != nil {
			return contract.StageBlockResult{}, err
		}
		r := contract.StageBlockResult{Node: n, Block: in.Block.ID, Kind: in.Block.Kind, Result: contract.BlockResult{CopiedFiles: 2}}
		if in.Verify && !f.noVerifyInBlock {
			f.record(ctx, "verify in "+label)
			r.Verified = &contract.VerifyBlockResult{Lane: in.Lane, Node: n, Block: in.Block.ID, Kind: in.Block.Kind, Result: contract.BlockVerify{OK: 3}}
			r.Verified.Result.Bad = f.verifyBad[in.Lane+"/"+in.Block.ID+"@"+n]
		}
		return r, nil
	})
	env.OnActivity("VerifyBlock", any2...).Return(func(ctx context.Context, in contract.VerifyBlockInput) (contract.VerifyBlockResult, error) {
		if q := strings.TrimPrefix(activity.GetInfo(ctx).TaskQueue, "node."); true {
			f.mu.Lock()
			gone := f.verifyGone[q] > 0
			if gone {
				f.verifyGone[q]--
			}
			f.mu.Unlock()
			if gone {
				return contract.VerifyBlockResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
			}
		}
		n := f.record(ctx, "VerifyBlock "+in.Lane+"/"+in.Block.ID)
		if f.notPolling[n] {
			return contract.VerifyBlockResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
		}
		r := contract.VerifyBlockResult{Node: n, Block: in.Block.ID, Kind: in.Block.Kind, Result: contract.BlockVerify{OK: 3}}
		r.Result.Bad = f.verifyBad[in.Lane+"/"+in.Block.ID+"@"+n]
		return r, nil
	})
}

// mockServe mocks the serve and stop activities.
func (f *fakeFleet) mockServe() {
	env := f.env
	env.OnActivity("StopLane", any2...).Return(func(ctx context.Context, in contract.StopLaneInput) (contract.StopLaneResult, error) {
		if err := f.goneErr(ctx); err != nil {
			return contract.StopLaneResult{}, err
		}
		n := f.record(ctx, "StopLane "+in.Lane)
		return contract.StopLaneResult{Node: n, Stopped: []string{"sparklane-" + in.Lane + "@" + n}}, nil
	})
	env.OnActivity("EnsureImage", any2...).Return(func(ctx context.Context, in contract.EnsureImageInput) (contract.EnsureImageResult, error) {
		if err := f.goneErr(ctx); err != nil {
			return contract.EnsureImageResult{}, err
		}
		n := f.record(ctx, "EnsureImage "+in.Image.String())
		if id, ok := f.imageUnpinned[n]; ok {
			if !in.Resolve {
				return contract.EnsureImageResult{}, newAppErr("image "+in.Image.String()+" missing on node "+n, fault.ImageMissing)
			}
			return contract.EnsureImageResult{Node: n, ID: id, Unpinned: true}, nil
		}
		return contract.EnsureImageResult{Node: n, ID: "sha256:" + in.Image.String()}, nil
	})
	env.OnActivity("BeforeServe", any2...).Return(func(ctx context.Context, in contract.BeforeServeInput) (contract.BeforeServeResult, error) {
		n := f.record(ctx, "BeforeServe "+in.Lane)
		return contract.BeforeServeResult{Node: n, Outputs: []contract.HookOutput{{Command: "true"}}}, nil
	})
	env.OnActivity("StartRank", any2...).Return(func(ctx context.Context, in contract.StartRankInput) (contract.StartRankResult, error) {
		if d := f.startDelay[strings.TrimPrefix(activity.GetInfo(ctx).TaskQueue, "node.")]; d > 0 {
			time.Sleep(d)
		}
		if err := f.goneErr(ctx); err != nil {
			return contract.StartRankResult{}, err
		}
		n := f.record(ctx, "StartRank "+in.Lane)
		f.mu.Lock()
		f.starts = append(f.starts, in)
		f.mu.Unlock()
		if err := f.startErr[in.Lane+"@"+n]; err != nil {
			return contract.StartRankResult{}, err
		}
		return contract.StartRankResult{Node: n, Rank: in.Plan.Rank, ID: "id-" + in.Plan.ContainerName, Name: in.Plan.ContainerName, Created: true}, nil
	})
}

// mockLaneProbe mocks the probe's and the post hooks' activities.
func (f *fakeFleet) mockLaneProbe() {
	env := f.env
	env.OnActivity("WaitReady", any2...).AfterFn(func() time.Duration {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.readyCalls++
		if f.readyCalls == 1 {
			return f.readyDelay
		}
		return 0
	}).Return(func(ctx context.Context, in contract.WaitReadyInput) (contract.WaitReadyResult, error) {
		f.record(ctx, "WaitReady "+in.Plan.Lane)
		if err := f.readyErr[in.Plan.Lane]; err != nil {
			return contract.WaitReadyResult{}, err
		}
		return contract.WaitReadyResult{BaseURL: "http://" + in.Plan.Lane, Model: in.Plan.Model, Seconds: 12}, nil
	})
	env.OnActivity("PostExec", any2...).Return(func(ctx context.Context, in contract.PostExecInput) (contract.PostHooksResult, error) {
		n := f.record(ctx, "PostExec "+in.Container)
		return contract.PostHooksResult{Node: n, Outputs: []contract.HookOutput{{Command: in.Commands[0]}}}, f.postErr["PostExec"]
	})
	env.OnActivity("PostCommands", any2...).Return(func(ctx context.Context, in contract.PostCommandsInput) (contract.PostHooksResult, error) {
		f.record(ctx, "PostCommands "+in.Lane)
		return contract.PostHooksResult{Outputs: []contract.HookOutput{{Command: in.Commands[0]}}}, f.postErr["PostCommands"]
	})
	env.OnActivity("Smoke", any2...).Return(func(ctx context.Context, in contract.SmokeInput) (contract.SmokeResult, error) {
		f.record(ctx, "Smoke "+in.BaseURL)
		var r contract.SmokeResult
		for _, p := range in.Prompts {
			r.Answers = append(r.Answers, contract.SmokeAnswer{Prompt: p.Prompt, Expect: p.Expect, Answer: p.Expect, OK: true})
		}
		return r, nil
	})
	env.OnActivity("DecodeProbe", any2...).Return(func(ctx context.Context, in contract.DecodeProbeInput) (contract.DecodeProbeResult, error) {
		f.record(ctx, "DecodeProbe "+in.BaseURL)
		return contract.DecodeProbeResult{DecodeTPS: 40, PromptTokens: in.PromptTokens, CompletionTokens: in.MaxTokens}, nil
	})
}

// mockPower mocks NodeOff and the power steps.
func (f *fakeFleet) mockPower() {
	env := f.env
	powerStep := func(name string, errp *error) func(context.Context, contract.PowerStepInput) (contract.PowerStepResult, error) {
		return func(ctx context.Context, in contract.PowerStepInput) (contract.PowerStepResult, error) {
			f.record(ctx, name+" "+in.Target)
			if err := f.powerErrs[name+" "+in.Target]; err != nil {
				return contract.PowerStepResult{}, err
			}
			if *errp != nil {
				return contract.PowerStepResult{}, *errp
			}
			return contract.PowerStepResult{Target: in.Target, Step: name, Detail: name + " done"}, nil
		}
	}
	env.OnActivity("NodeOff", any2...).Return(func(ctx context.Context, in contract.NodeOffInput) (contract.NodeOffResult, error) {
		f.record(ctx, "NodeOff "+in.Node)
		why, off := f.offOnPurpose[in.Node]
		return contract.NodeOffResult{Node: in.Node, Off: off, Why: why}, nil
	})
	env.OnActivity("PowerShutdown", any2...).Return(powerStep("PowerShutdown", &f.shutdownErr))
	env.OnActivity("PowerWaitUnreachable", any2...).Return(powerStep("PowerWaitUnreachable", &f.unreachErr))
	env.OnActivity("PowerRelayOff", any2...).Return(powerStep("PowerRelayOff", &f.relayOffErr))
}

// goneErr is the pickup timeout a node-pinned call meets while its node is
// gone (f.gone), counting the call down.
func (f *fakeFleet) goneErr(ctx context.Context) error {
	n := strings.TrimPrefix(activity.GetInfo(ctx).TaskQueue, "node.")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gone[n] > 0 {
		f.gone[n]--
		return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
	}
	return nil
}

// record notes one activity call as "label@node" (node activities) or
// "label" (control activities) and returns the node.
func (f *fakeFleet) record(ctx context.Context, label string) string {
	info := activity.GetInfo(ctx)
	q := info.TaskQueue
	node := ""
	if strings.HasPrefix(q, "node.") {
		node = strings.TrimPrefix(q, "node.")
		label += "@" + node
	} else if strings.HasPrefix(q, contract.GatewayQueue("")) {
		label += "@" + q
	} else if q != contract.ControlQueue && !info.IsLocalActivity {
		// A local activity runs in its workflow's worker (the control one).
		f.t.Errorf("%s ran on task queue %q, want %s or node.NAME", label, q, contract.ControlQueue)
	}
	f.mu.Lock()
	f.calls = append(f.calls, label)
	f.mu.Unlock()
	if f.onCall != nil {
		f.onCall(label)
	}
	return node
}

func (f *fakeFleet) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// count is how many recorded calls start with prefix.
func (f *fakeFleet) count(prefix string) int {
	n := 0
	for _, c := range f.callList() {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

// expectPhases checks that the recorded calls are exactly the phases'
// calls, phase after phase; calls inside one phase run in parallel and may
// come in any order.
func (f *fakeFleet) expectPhases(phases ...[]string) {
	f.t.Helper()
	calls := f.callList()
	pos := 0
	for k, ph := range phases {
		if pos+len(ph) > len(calls) {
			f.t.Fatalf("phase %d %v: only %d calls left; all calls:\n%s", k, ph, len(calls)-pos, strings.Join(calls, "\n"))
		}
		got := append([]string(nil), calls[pos:pos+len(ph)]...)
		want := append([]string(nil), ph...)
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, "|") != strings.Join(want, "|") {
			f.t.Fatalf("phase %d: got %v, want %v; all calls:\n%s", k, got, want, strings.Join(calls, "\n"))
		}
		pos += len(ph)
	}
	if pos != len(calls) {
		f.t.Fatalf("unexpected calls after the last phase: %v; all calls:\n%s", calls[pos:], strings.Join(calls, "\n"))
	}
}

// on expands a label to one call per node.
func on(label string, nodes ...string) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = label + "@" + n
	}
	return out
}

func cat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

// appErr digs the outermost application error out of a workflow error.
func appErr(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	if err == nil {
		t.Fatal("workflow succeeded, want a failure")
	}
	var app *temporal.ApplicationError
	if !errors.As(err, &app) {
		t.Fatalf("workflow error %v (%T) holds no application error", err, err)
	}
	return app
}

func testPlan(lane, hash string, nodes ...string) contract.LanePlan {
	p := contract.LanePlan{Lane: lane, Cluster: "c1", Runtime: "sim", Model: "model-" + lane, RecipeHash: hash, APIPort: 8000, TP: len(nodes)}
	for i, n := range nodes {
		p.Nodes = append(p.Nodes, contract.NodePlan{Node: n, Rank: i, Head: i == 0, ContainerName: fmt.Sprintf("sparklane-%s-r%d", lane, i), Image: contract.MustImageRef("img-" + lane), Command: "serve " + lane})
	}
	return p
}

func testBlocks() []contract.Staging {
	return []contract.Staging{
		{Kind: "hub-mirror", ID: "weights", Src: "/nas/hub", Dst: "/srv/hub"},
		{Kind: "sparse-rows", ID: "rows", Src: "/nas/rows", Dst: "/srv/rows"},
	}
}

func testRecipe(name string, blocks []contract.Staging, hooks bool) contract.Recipe {
	r := contract.Recipe{Name: name, Cluster: "c1", Runtime: "sim", Image: "img-" + name, Model: "model-" + name, Staging: blocks,
		Probe: contract.Probe{Smoke: []contract.Smoke{{Prompt: "2+2?", Expect: "4"}}}}
	if hooks {
		r.Hooks.BeforeServe = []string{"true"}
	}
	return r
}

// newAppErr is a permanent engine fault as the activities classify it.
func newAppErr(msg, typ string) error {
	return temporal.NewNonRetryableApplicationError(msg, typ, nil)
}
