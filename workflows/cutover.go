package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/devserver/searchattr"
	"github.com/sparklane/sparklane/internal/fault"
)

// CutoverInput switches a cluster to a lane. The starter resolved and
// rendered the recipe; the snapshot travels here so the run is reproducible
// from its history alone.
type CutoverInput struct {
	Recipe contract.Recipe   `json:"recipe"`
	Plan   contract.LanePlan `json:"plan"`
	// Stage is auto | skip | force.
	Stage      string `json:"stage"`
	NoWait     bool   `json:"no_wait,omitempty"`
	Bench      bool   `json:"bench,omitempty"`
	BenchLabel string `json:"bench_label,omitempty"`
	NoRollback bool   `json:"no_rollback,omitempty"`
	// PowerOn switches on the lane's nodes whose relay is off before staging.
	PowerOn bool `json:"power_on,omitempty"`
	// Room is passed to the stage step (cutover --make-room): a block
	// short of min_free names, or prunes, other lanes' blocks.
	Room *activities.DiskRoom `json:"room,omitempty"`
	// Fleet is every node of the config: a previous lane is stopped wherever
	// it runs, not only on the nodes the new lane needs.
	Fleet []string `json:"fleet,omitempty"`
	// Grace is the wait before the fleet probe's one re-probe.
	Grace  contract.Duration `json:"grace,omitempty"`
	Pickup contract.Duration `json:"pickup,omitempty"`
	// OutageBudget is how long a node may be gone mid-run before the
	// cutover fails naming it (0: DefaultOutageBudget).
	OutageBudget contract.Duration `json:"outage_budget,omitempty"`
	// StopForeign stops running containers sparklane did not start that
	// hold a GPU or the lane's port on the lane's nodes (--stop-foreign);
	// without it such a node is occupied and the cutover is refused.
	StopForeign bool `json:"stop_foreign,omitempty"`
}

// CutoverResult says what happened, step by step; on failure it is also
// the failure's details.
type CutoverResult struct {
	Lane    string `json:"lane"`
	Cluster string `json:"cluster"`
	OK      bool   `json:"ok"`
	// FailedStep and Error describe the first failure.
	FailedStep string `json:"failed_step,omitempty"`
	Error      string `json:"error,omitempty"`
	// Previous are the lanes that held the nodes and were stopped.
	Previous []string `json:"previous,omitempty"`
	// StoppedForeign are the foreign containers stopped (--stop-foreign),
	// as "NODE/NAME".
	StoppedForeign []string `json:"stopped_foreign,omitempty"`
	// RolledBack lists the previous lanes brought back after a failure;
	// OldLaneAnswers is true when they answered their probes again.
	RolledBack     []string                       `json:"rolled_back,omitempty"`
	RollbackError  string                         `json:"rollback_error,omitempty"`
	OldLaneAnswers bool                           `json:"old_lane_answers,omitempty"`
	Probe          *FleetProbeResult              `json:"probe,omitempty"`
	Stage          []StageNodeResult              `json:"stage,omitempty"`
	Verify         []activities.VerifyBlockResult `json:"verify,omitempty"`
	Serve          *ServeResult                   `json:"serve,omitempty"`
	Bench          *activities.BenchResult        `json:"bench,omitempty"`
	Steps          []Step                         `json:"steps"`
}

// Cutover runs stage → verify → serve → probe → bench for a lane on its
// cluster, after stopping whatever lane held those nodes. A failure after
// that stop rolls back: the new lane's containers are removed and the
// previous lane is served and probed again, under a disconnected context so
// a cancelled cutover still cleans up.
func Cutover(ctx workflow.Context, in CutoverInput) (CutoverResult, error) {
	t := newTracker(ctx, "Cutover", in.Plan.Lane)
	res := CutoverResult{Lane: in.Plan.Lane, Cluster: in.Plan.Cluster}
	fail := func(step string, err error) (CutoverResult, error) {
		res.FailedStep, res.Error = step, errMessage(err)
		res.Steps = t.steps()
		return res, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("cutover to %s failed at %s: %s", in.Plan.Lane, step, res.Error), "CutoverFailed", err, res)
	}
	nodes := planNodes(in.Plan)

	// The lane's nodes are held for this run alone (lease.go): a run on
	// an overlapping cluster that holds one of them refuses this one.
	leases, lerr := holdNodes(ctx, t, LeaseCutover, in.Plan.Lane, in.Plan.Cluster, nodes)
	if lerr != nil {
		return fail("hold nodes", lerr)
	}
	defer leases.release()

	// 0. Power on the lane's nodes that are off (--power-on). Runs started
	// before the step existed never asked for it; the gate records that
	// this run's code knows it.
	if in.PowerOn && workflow.GetVersion(ctx, versionPowerOn, workflow.DefaultVersion, 1) >= 1 {
		i := t.start("power on", "")
		var pre FleetProbeResult
		err := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID: CutoverID(in.Plan.Cluster) + "/power-probe", TaskQueue: ControlQueue,
			TypedSearchAttributes: searchattr.For(in.Plan.Lane, in.Plan.Cluster),
		}), FleetProbe, FleetProbeInput{Nodes: nodes, PickupTimeout: in.Pickup}).Get(ctx, &pre)
		var off []string
		for _, st := range pre.Nodes {
			if st.State == NodeOff {
				off = append(off, st.Node)
			}
		}
		if err == nil && len(off) > 0 {
			err = workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
				WorkflowID: CutoverID(in.Plan.Cluster) + "/power-on", TaskQueue: ControlQueue,
				TypedSearchAttributes: searchattr.For(in.Plan.Lane, in.Plan.Cluster),
			}), Power, PowerInput{Action: PowerOn, Targets: off}).Get(ctx, nil)
		}
		t.end(i, fmt.Sprintf("%d node(s) switched on", len(off)), err)
		if err != nil {
			return fail("power on", err)
		}
	}

	// 1. Fleet probe; its retry policy is the re-probe before bail.
	i := t.start("probe fleet", "")
	var probe FleetProbeResult
	pctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:  CutoverID(in.Plan.Cluster) + "/probe",
		TaskQueue:   ControlQueue,
		RetryPolicy: ProbeRetryPolicy(in.Grace.D()),
		// Child runs carry the lane too, so the UI's lane filter finds them.
		TypedSearchAttributes: searchattr.For(in.Plan.Lane, in.Plan.Cluster),
	})
	probeNodes := nodes
	for _, n := range in.Fleet {
		if !contains(probeNodes, n) {
			probeNodes = append(probeNodes, n)
		}
	}
	err := workflow.ExecuteChildWorkflow(pctx, FleetProbe, FleetProbeInput{Nodes: probeNodes, Require: nodes, Lane: in.Plan.Lane, Grace: in.Grace, PickupTimeout: in.Pickup,
		Ports: lanePorts(in.Plan), StopForeign: in.StopForeign}).Get(ctx, &probe)
	t.end(i, "", err)
	if err != nil {
		return fail("probe fleet", err)
	}
	res.Probe = &probe

	// 2. Which lanes hold our nodes, and where else they run. A lane that
	// runs only on other fleet nodes is left alone.
	ownOnly := workflow.GetVersion(ctx, versionPreviousOwnNodes, workflow.DefaultVersion, 1) >= 1
	for _, st := range probe.Nodes {
		if ownOnly && !contains(nodes, st.Node) {
			continue
		}
		for _, l := range st.Lanes {
			if l != in.Plan.Lane && !contains(res.Previous, l) {
				res.Previous = append(res.Previous, l)
			}
		}
	}
	prevNodes := map[string][]string{}
	for _, st := range probe.Nodes {
		for _, l := range st.Lanes {
			if contains(res.Previous, l) {
				prevNodes[l] = append(prevNodes[l], st.Node)
			}
		}
	}
	// A previous lane is stopped on fleet nodes outside the plan too:
	// those are held as well before anything is stopped.
	var extra []string
	for _, l := range res.Previous {
		for _, n := range prevNodes[l] {
			if !contains(nodes, n) && !contains(extra, n) {
				extra = append(extra, n)
			}
		}
	}
	if leases != nil && len(extra) > 0 {
		more, err := holdNodes(ctx, t, LeaseCutover, in.Plan.Lane, in.Plan.Cluster, extra)
		if err != nil {
			return fail("hold nodes", err)
		}
		defer more.release()
	}
	prevPlans := map[string]activities.ResolveLaneResult{}
	var unresolved []string
	for _, l := range res.Previous {
		i := t.start("resolve previous "+l, "")
		var r activities.ResolveLaneResult
		err := workflow.ExecuteActivity(controlOpts(ctx, time.Minute, 0, 3), ca.ResolveLane, activities.ResolveLaneInput{Lane: l, Cluster: in.Plan.Cluster}).Get(ctx, &r)
		t.end(i, "", err)
		if err != nil {
			unresolved = append(unresolved, l+": "+errMessage(err))
			continue
		}
		prevPlans[l] = r
	}

	// Foreign engines on the lane's nodes, stopped only when asked
	// (the probe refused the nodes otherwise).
	for _, st := range probe.Nodes {
		if !in.StopForeign || len(st.ForeignNames) == 0 || !contains(nodes, st.Node) {
			continue
		}
		if workflow.GetVersion(ctx, versionStopForeign, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			break
		}
		i := t.start("stop foreign", st.Node)
		var sf activities.StopForeignResult
		err := workflow.ExecuteActivity(nodeOpts(ctx, st.Node, in.Pickup.D(), 2*time.Minute, 0, 2), na.StopForeign, activities.StopForeignInput{Names: st.ForeignNames}).Get(ctx, &sf)
		t.end(i, strings.Join(sf.Stopped, ", "), err)
		if err != nil {
			return fail("stop foreign on "+st.Node, err)
		}
		for _, n := range sf.Stopped {
			res.StoppedForeign = append(res.StoppedForeign, st.Node+"/"+n)
		}
	}

	// From the stop on, a failure rolls back.
	rollback := func(step string, cause error) (CutoverResult, error) {
		dctx, cancel := workflow.NewDisconnectedContext(ctx)
		defer cancel()
		var errs []string
		if err := stopLane(dctx, t, in.Plan.Lane, nodes, in.Pickup.D(), in.OutageBudget.D()); err != nil {
			errs = append(errs, "stopping "+in.Plan.Lane+": "+errMessage(err))
		}
		if in.NoRollback {
			t.skip("rollback", "", "--no-rollback")
		} else {
			answers := len(res.Previous) > 0
			for _, l := range res.Previous {
				r, ok := prevPlans[l]
				if !ok {
					answers = false
					continue
				}
				i := t.start("rollback "+l, "")
				sr, err := serveLane(dctx, t, r.Recipe, r.Plan, false, in.Pickup.D(), in.OutageBudget.D())
				t.end(i, "", err)
				if err != nil {
					answers = false
					errs = append(errs, "serving "+l+" again: "+errMessage(err))
					if serr := stopLane(dctx, t, l, planNodes(r.Plan), in.Pickup.D(), in.OutageBudget.D()); serr != nil {
						errs = append(errs, "stopping "+l+" after its failed rollback: "+errMessage(serr))
					}
					continue
				}
				res.RolledBack = append(res.RolledBack, l)
				answers = answers && sr.Answers
			}
			res.OldLaneAnswers = answers
			errs = append(errs, unresolved...)
		}
		if len(errs) > 0 {
			res.RollbackError = strings.Join(errs, "; ")
		}
		return fail(step, cause)
	}

	// 3. Stop them (verified). A stop that fails partway rolls back too:
	// a half-stopped lane is brought back whole.
	for _, l := range res.Previous {
		if err := stopLane(ctx, t, l, prevNodes[l], in.Pickup.D(), in.OutageBudget.D()); err != nil {
			if workflow.GetVersion(ctx, versionStopRollback, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				// Runs recorded before the change failed without a rollback.
				return fail("stop "+l, err)
			}
			return rollback("stop "+l, err)
		}
	}
	// 4. Stage every block on every node, in parallel.
	blocks := in.Recipe.Staging
	if len(blocks) == 0 {
		t.skip("stage", "", "no [[staging]] blocks")
	} else if in.Stage == StageSkip {
		t.skip("stage", "", "--stage=skip")
	} else {
		i := t.start("stage", "")
		st, err := stageChildren(ctx, t, in.Plan, blocks, "", in.Stage, false, false, in.Pickup.D(), in.OutageBudget.D(), in.Room)
		t.end(i, "", err)
		res.Stage = st
		if err != nil {
			return rollback("stage", err)
		}
	}

	// 5. Verify (ledger verify-only): a mismatch fails before anything is served.
	if len(blocks) > 0 {
		i := t.start("verify", "")
		type item struct {
			n    contract.NodePlan
			b    contract.Staging
			name string
		}
		var items []item
		var itemNodes []string
		for _, n := range in.Plan.Nodes {
			for _, b := range blocks {
				items = append(items, item{n, b, b.ID + " on " + n.Node})
				itemNodes = append(itemNodes, n.Node)
			}
		}
		steps := make([]int, len(items))
		for k := range steps {
			steps[k] = i
		}
		// A node whose worker is gone is waited for within the outage
		// budget (runs recorded before versionVerifyOutageWait: the same
		// commands, failing at once).
		wait := workflow.GetVersion(ctx, versionVerifyOutageWait, workflow.DefaultVersion, 1) >= 1
		verified := make([]activities.VerifyBlockResult, len(items))
		errs := perNode(ctx, t, wait, in.OutageBudget.D(), steps, itemNodes, func(ctx workflow.Context, k int) workflow.Future {
			n, b := items[k].n, items[k].b
			vctx := nodeOpts(ctx, n.Node, in.Pickup.D(), verifyRunTimeout, stageHeartbeat, 3)
			return workflow.ExecuteActivity(summarize(vctx, n.Node, n.Rank, "verify "+in.Plan.Lane+"/"+b.ID), na.VerifyBlock, activities.VerifyBlockInput{Lane: in.Plan.Lane, Block: b, Rank: n.Rank, TP: in.Plan.TP})
		}, func(ctx workflow.Context, k int, f workflow.Future) error { return f.Get(ctx, &verified[k]) })
		var bad []string
		var verr error
		for k, err := range errs {
			v := verified[k]
			if err != nil {
				bad = append(bad, items[k].name+": "+errMessage(err))
				if verr == nil {
					verr = err
				}
				continue
			}
			res.Verify = append(res.Verify, v)
			if !v.Result.Clean() {
				bad = append(bad, fmt.Sprintf("%s: %d bad, %d missing (first: %s)", items[k].name, v.Result.NBad(), v.Result.NMissing(), firstOf(v.Result.Bad, v.Result.Missing)))
			}
		}
		if len(bad) > 0 {
			err := temporal.NewNonRetryableApplicationError("staged data does not verify: "+strings.Join(bad, "; "), fault.ContentMismatch, verr)
			t.end(i, "", err)
			return rollback("verify", err)
		}
		t.end(i, fmt.Sprintf("%d blocks", len(res.Verify)), nil)
	}

	// 6–7. Serve and probe.
	sr, err := serveLane(ctx, t, in.Recipe, in.Plan, in.NoWait, in.Pickup.D(), in.OutageBudget.D())
	res.Serve = &sr
	if err != nil {
		step := "serve"
		if sr.Ranks != nil && len(sr.Ranks) == len(in.Plan.Nodes) {
			step = "probe"
		}
		return rollback(step, err)
	}

	// 8. Bench when asked.
	if in.Bench && !in.NoWait {
		i := t.start("bench", "")
		var br activities.BenchResult
		var staged []activities.StageBlockResult
		for _, s := range res.Stage {
			staged = append(staged, s.Blocks...)
		}
		bctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			TaskQueue: ControlQueue, StartToCloseTimeout: 6 * time.Hour, HeartbeatTimeout: 2 * time.Minute,
			RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 2},
		})
		info := workflow.GetInfo(ctx)
		err := workflow.ExecuteActivity(bctx, ca.Bench, activities.BenchInput{
			Recipe: in.Recipe, Plan: in.Plan, BaseURL: sr.BaseURL, Model: sr.Ready.Model, Label: nonEmpty(in.BenchLabel, "cutover"),
			Baseline: "latest", WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
			Staging: staged, Decode: sr.Decode,
		}).Get(ctx, &br)
		t.end(i, br.Summary, err)
		if err != nil {
			// The lane serves; a failed bench is reported, not rolled back.
			res.Error = "bench: " + errMessage(err)
		} else {
			res.Bench = &br
		}
	}
	res.OK = true
	res.Steps = t.steps()
	return res, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// lanePorts are the ports a lane's engine listens on, which a foreign
// engine must not hold.
func lanePorts(p contract.LanePlan) []int {
	if p.APIPort > 0 {
		return []int{p.APIPort}
	}
	return nil
}
