package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/memfit"
	"github.com/sparklane/sparklane/internal/engine/probe"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/internal/metrics"
	"github.com/sparklane/sparklane/internal/node"
)

// ControlActivities run on the control worker (queue sparklane): SSH
// reachability, recipe resolution, HTTP probes, bench and reports. When one
// needs a node's Docker it dials it (locally, or through SSH to the node's
// socket with the host key checked).
type ControlActivities struct {
	Config *config.Config
	Log    *zap.Logger
	// SSHTimeout bounds each SSH reachability check (default 5s).
	SSHTimeout time.Duration
	// Version is sparklane's version, written into reports.
	Version string
	// UIURL is the Temporal web UI base, for links in reports.
	UIURL string
	// Temporal lets power-on check that a node worker polls its queue.
	Temporal client.Client
	// Metrics records readiness, probe, bench and node outage figures
	// (nil: none).
	Metrics *metrics.Metrics
	// Seams are a test's fault points (nil in production).
	Seams *Seams
}

func (a *ControlActivities) node(name string) (config.Node, error) {
	for _, n := range a.Config.Nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return config.Node{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s is not in %s", name, a.Config.File))
}

// CheckSSH dials the node with its host key checked. A node with an empty
// ssh is this machine and needs no SSH.
func (a *ControlActivities) CheckSSH(ctx context.Context, in contract.SSHCheckInput) (contract.SSHCheckResult, error) {
	n, err := a.node(in.Node)
	if err != nil {
		return contract.SSHCheckResult{Node: in.Node}, classify(err)
	}
	res := contract.SSHCheckResult{Node: in.Node}
	if off, why := a.relayOff(ctx, in.Node); off {
		res.Off, res.Why = true, why
		return res, nil
	}
	if n.SSH == "" {
		res.Local, res.Reachable = true, true
		return res, nil
	}
	t, err := a.sshTarget(n)
	if err != nil {
		res.Why = err.Error()
		return res, nil
	}
	timeout := a.SSHTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if err := node.Check(ctx, t, timeout); err != nil {
		res.Why = err.Error()
		return res, nil
	}
	res.Reachable = true
	return res, nil
}

func (a *ControlActivities) sshTarget(n config.Node) (node.SSHTarget, error) {
	t, err := node.ParseSSH(n.SSH)
	if err != nil {
		return t, fmt.Errorf("node %s: ssh %q: %w", n.Name, n.SSH, err)
	}
	t.KnownHosts, t.Identity = n.KnownHosts, n.Identity
	return t, nil
}

// nodeDocker reaches a node's Docker: the local socket for a local node,
// the node's socket through SSH otherwise.
func (a *ControlActivities) nodeDocker(ctx context.Context, name string) (serve.Docker, func(), error) {
	n, err := a.node(name)
	if err != nil {
		return nil, nil, err
	}
	var t *node.SSHTarget
	if n.SSH != "" {
		tt, err := a.sshTarget(n)
		if err != nil {
			return nil, nil, err
		}
		t = &tt
	}
	c, err := node.DockerClient(ctx, n.Docker, t)
	if err != nil {
		return nil, nil, fmt.Errorf("node %s: docker: %w", name, err)
	}
	return c, func() { c.Close() }, nil
}

// ResolveLane reads a lane's recipe from recipes_dir and renders it (for
// rollback to a previous lane, and for schedules that name lanes) with
// lane.Resolve, as the starter does.
func (a *ControlActivities) ResolveLane(ctx context.Context, in contract.ResolveLaneInput) (contract.ResolveLaneResult, error) {
	// recipes_dir and recipes_dirs, as the CLI reads them: a broken recipe
	// elsewhere does not stop this lane from resolving.
	set, err := config.LoadRecipeSet(a.Config, a.Config.File)
	if err != nil {
		return contract.ResolveLaneResult{}, classify(fault.Permanent(fault.InvalidSpec, err))
	}
	for _, w := range set.Warnings {
		a.Log.Warn("recipes: skipped", zap.String("why", w))
	}
	r, plan, err := lane.Resolve(a.Config, set, lane.Request{Lane: in.Lane, Fallback: in.Cluster, Overrides: in.Overrides})
	if err != nil {
		return contract.ResolveLaneResult{}, classify(fault.Permanent(fault.InvalidSpec, err))
	}
	res := contract.ResolveLaneResult{Recipe: *r, Plan: *plan}
	if est, _ := lane.Fit(a.Config, r, plan, memfit.LoadDiscovered(a.Config.StateDir)); est != nil && est.Err() != nil {
		res.MemoryFit = est.Err().Error()
		a.Log.Warn("lane does not fit its nodes' memory by the estimate (resolved all the same: it ran before, or is only verified)",
			zap.String("lane", r.Name), zap.Strings("arithmetic", est.Lines()))
	}
	return res, nil
}

// WaitReady polls the head's API until it answers. A refused connection
// means "still loading" until the head has answered once; any rank
// container that exits fails it at once with its exit code and last log
// lines. Heartbeats keep a restarted control worker's retry waiting on the
// same containers (it never starts a second set).
func (a *ControlActivities) WaitReady(ctx context.Context, in contract.WaitReadyInput) (contract.WaitReadyResult, error) {
	base := lane.BaseURL(a.Config, in.Plan)
	type conn struct {
		d     serve.Docker
		close func()
	}
	var mu sync.Mutex
	conns := map[string]conn{}
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	ranks := func(ctx context.Context) ([]probe.RankState, error) {
		var out []probe.RankState
		for _, n := range in.Plan.Nodes {
			mu.Lock()
			c, ok := conns[n.Node]
			mu.Unlock()
			if !ok {
				d, closeFn, err := a.nodeDocker(ctx, n.Node)
				if err != nil {
					return nil, err
				}
				c = conn{d, closeFn}
				mu.Lock()
				conns[n.Node] = c
				mu.Unlock()
			}
			states, err := serve.InspectLane(ctx, c.d, in.Plan.Lane, 50)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", n.Node, err)
			}
			found := false
			for _, s := range states {
				if s.Rank != n.Rank {
					continue
				}
				found = true
				out = append(out, probe.RankState{Node: n.Node, Rank: s.Rank, Container: s.Name, State: s.State, ExitCode: s.ExitCode, Logs: s.Logs})
			}
			if !found {
				out = append(out, probe.RankState{Node: n.Node, Rank: n.Rank, Container: n.ContainerName, State: "missing", ExitCode: -1})
			}
		}
		return out, nil
	}
	ctx, err := apiKeyContext(ctx, in.APIKeyEnv)
	if err != nil {
		return contract.WaitReadyResult{BaseURL: base}, classify(err)
	}
	head := in.Plan.Nodes[0]
	findInLog := func(ctx context.Context, sigs []string) ([]string, string, error) {
		where := fmt.Sprintf("the head's log (container %s on node %s)", head.ContainerName, head.Node)
		if _, err := ranks(ctx); err != nil { // opens the node's Docker connection
			return nil, where, err
		}
		mu.Lock()
		c := conns[head.Node]
		mu.Unlock()
		missing, err := serve.FindInLogs(ctx, c.d, head.ContainerName, sigs)
		return missing, where, err
	}
	r, err := probe.WaitReady(ctx, probe.ReadyInput{BaseURL: base, Path: in.Path, Budget: in.Budget.D(), LogSignatures: in.LogSignatures, FindInLog: findInLog}, ranks, func(p probe.ReadyProgress) { heartbeat(ctx, p) })
	if err != nil {
		return contract.WaitReadyResult{BaseURL: base}, classify(err)
	}
	a.Metrics.Ready(in.Plan.Lane, r.Elapsed)
	return contract.WaitReadyResult{BaseURL: base, Model: r.Model, Seconds: r.Elapsed.Seconds()}, nil
}

// Smoke asks the recipe's smoke prompts and checks the expected substrings.
func (a *ControlActivities) Smoke(ctx context.Context, in contract.SmokeInput) (contract.SmokeResult, error) {
	var out contract.SmokeResult
	ctx, err := apiKeyContext(ctx, in.APIKeyEnv)
	if err != nil {
		return out, classify(err)
	}
	rs, err := probe.Smoke(ctx, in.BaseURL, in.Model, in.Prompts)
	for _, r := range rs {
		out.Answers = append(out.Answers, contract.SmokeAnswer{Prompt: r.Prompt, Expect: r.Expect, Answer: r.Answer, OK: r.OK})
	}
	return out, classify(err)
}

// DecodeProbe measures decode and prefill speed with a temperature-0 request.
func (a *ControlActivities) DecodeProbe(ctx context.Context, in contract.DecodeProbeInput) (contract.DecodeProbeResult, error) {
	ctx, err := apiKeyContext(ctx, in.APIKeyEnv)
	if err != nil {
		return contract.DecodeProbeResult{}, classify(err)
	}
	if in.ModelType == contract.ModelEmbedding || in.ModelType == contract.ModelReranker {
		pr, err := probe.PoolProbe(ctx, in.BaseURL, in.Model, in.ModelType)
		if err != nil {
			return contract.DecodeProbeResult{}, classify(err)
		}
		pp := poolProbe(pr)
		return contract.DecodeProbeResult{Pool: &pp}, nil
	}
	r, err := probe.DecodeProbe(ctx, probe.DecodeInput{BaseURL: in.BaseURL, Model: in.Model, PromptTokens: in.PromptTokens, MaxTokens: in.MaxTokens})
	if err != nil {
		return contract.DecodeProbeResult{}, classify(err)
	}
	if in.Lane != "" {
		a.Metrics.Probed(in.Lane, r.DecodeTPS, time.Duration(r.TTFTSeconds*float64(time.Second)))
	}
	return contract.DecodeProbeResult{DecodeTPS: r.DecodeTPS, PrefillTPS: r.PrefillTPS, TTFTSeconds: r.TTFTSeconds, PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens}, nil
}

// apiKeyContext reads the engine's API key from this worker's environment
// variable env ([probe] api_key_env) into ctx for the probe's requests. An
// unset or empty variable is a permanent error naming it (the key itself
// is never logged, returned or put in history).
func apiKeyContext(ctx context.Context, env string) (context.Context, error) {
	if env == "" {
		return ctx, nil
	}
	key := os.Getenv(env)
	if key == "" {
		return ctx, fault.Permanent(fault.InvalidSpec, fmt.Errorf("[probe] api_key_env names %s, which is not set in the control worker's environment: export it where the control service runs (it is read there, never stored)", env))
	}
	return probe.WithAPIKey(ctx, key), nil
}

// WriteVerifyReport writes a short markdown report of a verify run under
// state_dir/reports/verify and returns its path.
func (a *ControlActivities) WriteVerifyReport(ctx context.Context, in contract.VerifyReportInput) (string, error) {
	dir := filepath.Join(a.Config.StateDir, "reports", "verify")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", classify(err)
	}
	now := time.Now().UTC()
	var b strings.Builder
	drift := len(in.Failures) > 0
	for _, bl := range in.Blocks {
		if !bl.Result.Clean() {
			drift = true
		}
	}
	verdict := "clean"
	if drift {
		verdict = "DRIFT"
		if len(in.Repaired) > 0 {
			verdict = "drift, repaired"
		}
	}
	fmt.Fprintf(&b, "# Verify %s — %s\n\nWorkflow `%s`, run `%s`.\n\n", now.Format(time.RFC3339), verdict, in.WorkflowID, in.RunID)
	if a.UIURL != "" {
		fmt.Fprintf(&b, "UI: %s/namespaces/%s/workflows/%s/%s\n\n", a.UIURL, a.Config.Temporal.Namespace, in.WorkflowID, in.RunID)
	}
	b.WriteString("| lane | block | node | ok | bad | missing |\n|---|---|---|---:|---:|---:|\n")
	for _, bl := range in.Blocks {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d |\n", bl.Lane, bl.Block, bl.Node, bl.Result.OK, bl.Result.NBad(), bl.Result.NMissing())
	}
	for _, bl := range in.Blocks {
		for _, p := range bl.Result.Bad {
			fmt.Fprintf(&b, "\n- bad: %s/%s on %s: `%s`", bl.Lane, bl.Block, bl.Node, p)
		}
		for _, p := range bl.Result.Missing {
			fmt.Fprintf(&b, "\n- missing: %s/%s on %s: `%s`", bl.Lane, bl.Block, bl.Node, p)
		}
		if bl.Result.Truncated() {
			fmt.Fprintf(&b, "\n- %s/%s on %s: only the first %d of each list shown; the full lists are in `%s` on %s", bl.Lane, bl.Block, bl.Node, contract.ListLimit, nonEmptyOr(bl.Result.ListFile, "(not written)"), bl.Node)
		}
	}
	for _, r := range in.Repaired {
		fmt.Fprintf(&b, "\n- repaired: %s on %s: %d files re-copied", r.Block, r.Node, r.Result.CopiedFiles)
	}
	for _, f := range in.Failures {
		fmt.Fprintf(&b, "\n- failed: %s", f)
	}
	b.WriteString("\n")
	path := filepath.Join(dir, now.Format("20060102T150405Z")+"_verify.md")
	if err := atomicfile.Write(path, []byte(b.String()), 0o644); err != nil {
		return "", classify(err)
	}
	return path, nil
}

// nonEmptyOr is s, or def when s is empty.
func nonEmptyOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// PostCommands runs the lane's post_commands on the control host (this
// service), after its post_exec: each with sh -c in state_dir, in order,
// the first failure stopping (a non-zero exit is a permanent HookFailed).
// SPARKLANE_LANE is set; outputs are masked as before_serve hooks' are.
func (a *ControlActivities) PostCommands(ctx context.Context, in contract.PostCommandsInput) (contract.PostHooksResult, error) {
	dir := a.Config.StateDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return contract.PostHooksResult{}, classify(fmt.Errorf("post_commands of lane %s: state_dir %s: %w", in.Lane, dir, err))
	}
	r, err := serve.RunHooks(ctx, serve.HooksInput{Commands: in.Commands, Timeout: in.Timeout.D(), Dir: dir, Label: "post_commands",
		Env: map[string]string{"SPARKLANE_LANE": in.Lane}})
	res := contract.PostHooksResult{}
	for _, o := range r.Outputs {
		res.Outputs = append(res.Outputs, contract.HookOutput{Command: o.Command, Exit: o.Exit, Output: o.Output})
	}
	if err != nil && len(r.Outputs) > 0 && r.Outputs[len(r.Outputs)-1].Exit > 0 {
		err = fault.Permanent(fault.HookFailed, fmt.Errorf("lane %s: %w", in.Lane, err))
	}
	return res, classify(err)
}
