package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/lane"
)

func (a *App) stageCmd() *cobra.Command {
	var f laneFlags
	var only, mode string
	var dryRun, verify, makeRoom, fetch bool
	cmd := &cobra.Command{
		Use:   "stage --lane L [--cluster C] [--node N] [--dry-run] [--stage=auto|force] [--make-room] [--fetch]",
		Short: "stage a lane's [[staging]] blocks onto its nodes (resumable, verified)",
		RunE: a.withLane(&f, func(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan) error {
			if mode != contract.StageAuto && mode != contract.StageForce {
				return fmt.Errorf("--stage=%s: use auto or force (skip makes no sense for 'stage')", mode)
			}
			if len(r.Staging) == 0 {
				return fmt.Errorf("lane %s has no [[staging]] blocks (%s)", r.Name, r.File)
			}
			if err := laneNode(plan, only); err != nil {
				return err
			}
			// --fetch fetches every hub-mirror block's repos into the NAS
			// first; without it, the blocks with fetch = true.
			fp, err := a.fetchPlan(cfg, r, lane.FetchOptions{MarkedOnly: !fetch})
			if err != nil {
				return err
			}
			if fetch && fp == nil {
				return fmt.Errorf("--fetch: lane %s has no hub-mirror blocks to fetch (%s)", r.Name, r.File)
			}
			if dryRun {
				a.dryFetch, a.dryBuildOn = fp, only
				return a.dryRun(ctx, cfg, r, plan, "stage")
			}
			budget, err := outageBudget(cfg, r)
			if err != nil {
				return err
			}
			room, err := a.diskRoom(makeRoom)
			if err != nil {
				return err
			}
			// A sim lane's engine-sim image on no node is built on --node
			// (else the head); the stage's image step moves it on.
			if _, err := a.ensureSimImage(ctx, cfg, plan, only); err != nil {
				return err
			}
			var res contract.StageResult
			if err := a.startFollow(ctx, runSpec{ID: contract.StageID(r.Name), Workflow: contract.WorkflowStage, Lane: r.Name, Cluster: r.Cluster, FollowSame: true,
				Input: contract.StageInput{Plan: *plan, Blocks: r.Staging, Only: only, Mode: mode, Verify: verify, OutageBudget: contract.Duration(budget), Room: room, Fetch: fp, Build: r.BuildFor(*plan, only), Pull: r.PullFor(*plan, only)}}, &res); err != nil {
				return err
			}
			if res.Fetch != nil && !a.JSON && fp != nil {
				if err := a.printFetch(*fp, *res.Fetch); err != nil {
					return err
				}
			}
			return a.printStage(res)
		}),
	}
	f.bind(cmd, overrideHelp)
	cmd.Flags().StringVar(&only, "node", "", "stage only this node")
	cmd.Flags().StringVar(&mode, "stage", "auto", "auto (copy what the ledger does not vouch for) | force (re-check every file against the source)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan (files, bytes, links, skipped, adopted); write nothing")
	cmd.Flags().BoolVar(&makeRoom, "make-room", false, "when a block would fail min_free, remove other lanes' least recently served blocks on that node (never a running lane's) until it fits")
	cmd.Flags().BoolVar(&verify, "verify", true, "verify (ledger, verify-only) after staging")
	cmd.Flags().BoolVar(&fetch, "fetch", false, "first download the lane's hub-mirror repos from the Hub into the NAS at their revision (as starter fetch; blocks with fetch = true always are)")
	return cmd
}

// stageJSON is the stable JSON of `starter stage --json`.
type stageJSON struct {
	Lane  string          `json:"lane"`
	Nodes []stageNodeJSON `json:"nodes"`
	// Fetch is what the stage fetched from the Hub first (--fetch).
	Fetch *contract.FetchResult `json:"fetch,omitempty"`
	// Images is the image step per node: its state, the node it
	// received from and the bytes that moved.
	Images []contract.ImageNodeResult `json:"images,omitempty"`
}

type stageNodeJSON struct {
	Node   string           `json:"node"`
	Blocks []stageBlockJSON `json:"blocks"`
}

type stageBlockJSON struct {
	Block string `json:"block"`
	Kind  string `json:"kind"`
	contract.BlockResult
}

func (a *App) printStage(res contract.StageResult) error {
	out := stageJSON{Lane: res.Lane, Nodes: []stageNodeJSON{}, Fetch: res.Fetch, Images: res.Images}
	var rows [][]string
	for _, n := range res.Nodes {
		nj := stageNodeJSON{Node: n.Node, Blocks: []stageBlockJSON{}}
		for _, b := range n.Blocks {
			nj.Blocks = append(nj.Blocks, stageBlockJSON{Block: b.Block, Kind: b.Kind, BlockResult: b.Result})
			r := b.Result
			src := "-"
			if r.Relay != nil {
				src = sourcesText(r.ByteSources, "")
				if r.Relay.Refetched > 0 {
					src += fmt.Sprintf(" (%d refetched from the NAS)", r.Relay.Refetched)
				}
				if r.Relay.Error != "" {
					src += " (relay stopped: " + r.Relay.Error + ")"
				}
				if src == "" {
					src = "NAS 0 B"
				}
			}
			rows = append(rows, []string{n.Node, b.Block, fmt.Sprint(r.CopiedFiles), contract.HumanBytes(r.CopiedBytes),
				fmt.Sprint(r.VerifiedFiles), fmt.Sprint(r.AdoptedFiles), fmt.Sprint(r.SkippedFiles), fmt.Sprint(r.Links), fmt.Sprintf("%.1f", r.Seconds), src})
		}
		out.Nodes = append(out.Nodes, nj)
	}
	return a.output(out, func() {
		for _, line := range imageMoved(res.Images, res.Pulled, res.Built) {
			fmt.Fprintf(a.Out, "image %s\n", line)
		}
		table(a.Out, []string{"NODE", "BLOCK", "COPIED", "BYTES", "VERIFIED", "ADOPTED", "SKIPPED", "LINKS", "SECONDS", "SOURCES"}, rows)
	})
}

func (a *App) verifyCmd() *cobra.Command {
	var f laneFlags
	var only string
	var full bool
	cmd := &cobra.Command{
		Use:   "verify --lane L [--full] [--node N]",
		Short: "verify staged blocks without writing; exit 1 when anything is bad or missing",
		RunE: a.withLane(&f, func(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan) error {
			if err := laneNode(plan, only); err != nil {
				return err
			}
			run, err := a.start(ctx, runSpec{ID: contract.VerifyID(r.Name), Workflow: contract.WorkflowVerify, Lane: r.Name, Cluster: r.Cluster, FollowSame: true,
				Input: contract.VerifyInput{Lanes: []contract.VerifyLane{{Plan: *plan, Blocks: r.Staging}}, Full: full, Only: only}})
			if err != nil {
				return err
			}
			var res contract.VerifyWorkflowResult
			err = a.follow(ctx, run, &res)
			if err != nil && !appErrorDetails(err, &res) {
				return err
			}
			var failure string
			if err != nil {
				failure = rootMessage(err)
				if idle := noWorker(res); len(idle) > 0 && !res.Drift {
					// The node was never asked: "1 missing" would send the
					// operator hunting for drift that may not exist.
					var msgs []string
					for _, n := range idle {
						msgs = append(msgs, noWorkerMessage(cfg, n))
					}
					failure = strings.Join(msgs, "; ")
				}
			}
			if perr := a.printVerify(res, failure); perr != nil {
				return perr
			}
			if failure != "" {
				return exitCode(1, errors.New(failure))
			}
			return nil
		}),
	}
	f.bindLane(cmd)
	cmd.Flags().StringVar(&only, "node", "", "verify only this node")
	cmd.Flags().BoolVar(&full, "full", false, "hash whole contents (sha256 against LFS blob names / sources), not samples")
	return cmd
}

type verifyJSON struct {
	Nodes []verifyBlockJSON `json:"nodes"`
	OK    bool              `json:"ok"`
	// Error is why verify fails (drift, or no worker on a node).
	Error string `json:"error,omitempty"`
	// NoWorker lists nodes whose worker never picked up the check:
	// nothing was verified there.
	NoWorker []string `json:"no_worker,omitempty"`
	// Off lists nodes that are off on purpose (relay off, or powered down
	// by sparklane): off, not verified — not drift, not a failure.
	Off []string `json:"off,omitempty"`
}

// noWorker lists the nodes whose blocks were not verified because no
// worker polled their queue: the workflow's typed result, in plan order.
func noWorker(res contract.VerifyWorkflowResult) []string { return res.NoWorker }

// noWorkerMessage says which queue nobody polls and how to start its worker.
func noWorkerMessage(cfg *config.Config, node string) string {
	file := "sparklane.toml"
	if cfg != nil && cfg.File != "" {
		file = cfg.File
	}
	return fmt.Sprintf("no worker on %s — nothing was verified there; start it with 'worker node --node %s --config %s' on %s, or install it with 'starter fleet install %s'",
		contract.NodeQueue(node), node, file, node, node)
}

type verifyBlockJSON struct {
	Node    string   `json:"node"`
	Block   string   `json:"block"`
	Kind    string   `json:"kind"`
	OK      int      `json:"ok"`
	Bad     []string `json:"bad"`
	Missing []string `json:"missing"`
	// NoWorker: the block was not checked (no worker on the node).
	NoWorker bool `json:"no_worker,omitempty"`
	// Off: the block was not checked because its node is off on purpose.
	Off bool `json:"off,omitempty"`
}

func (a *App) printVerify(res contract.VerifyWorkflowResult, failure string) error {
	idle := noWorker(res)
	out := verifyJSON{OK: !res.Drift && len(idle) == 0, Nodes: []verifyBlockJSON{}, Error: failure, NoWorker: idle, Off: res.Off}
	var rows [][]string
	for _, b := range res.Blocks {
		if b.Off {
			out.Nodes = append(out.Nodes, verifyBlockJSON{Node: b.Node, Block: b.Block, Kind: b.Kind, Bad: []string{}, Missing: []string{}, Off: true})
			rows = append(rows, []string{b.Node, b.Block, "-", "-", "-  (off, not verified)"})
			continue
		}
		if b.NoWorker {
			out.Nodes = append(out.Nodes, verifyBlockJSON{Node: b.Node, Block: b.Block, Kind: b.Kind, Bad: []string{}, Missing: []string{}, NoWorker: true})
			rows = append(rows, []string{b.Node, b.Block, "-", "-", "-  (no worker)"})
			continue
		}
		out.Nodes = append(out.Nodes, verifyBlockJSON{Node: b.Node, Block: b.Block, Kind: b.Kind, OK: b.Result.OK, Bad: nonNil(b.Result.Bad), Missing: nonNil(b.Result.Missing)})
		rows = append(rows, []string{b.Node, b.Block, fmt.Sprint(b.Result.OK), fmt.Sprint(b.Result.NBad()), fmt.Sprint(b.Result.NMissing())})
	}
	return a.output(out, func() { a.printVerifyText(res, rows) })
}

// printVerifyText is verify's table, then the off nodes and each bad or
// missing path.
func (a *App) printVerifyText(res contract.VerifyWorkflowResult, rows [][]string) {
	table(a.Out, []string{"NODE", "BLOCK", "OK", "BAD", "MISSING"}, rows)
	for i, n := range res.Off {
		fmt.Fprintf(a.Out, "off, not verified: %s (%s)\n", n, res.OffWhy[i])
	}
	for _, b := range res.Blocks {
		for _, p := range b.Result.Bad {
			fmt.Fprintf(a.Out, "bad: %s %s %s\n", b.Node, b.Block, p)
		}
		for _, p := range b.Result.Missing {
			fmt.Fprintf(a.Out, "missing: %s %s %s\n", b.Node, b.Block, p)
		}
		if more := b.Result.NBad() + b.Result.NMissing() - len(b.Result.Bad) - len(b.Result.Missing); more > 0 {
			fmt.Fprintf(a.Out, "… and %d more on %s %s (only the first %d of each list travel in the run's history)\n", more, b.Node, b.Block, len(b.Result.Missing))
			if b.Result.ListFile != "" {
				fmt.Fprintf(a.Out, "full list: %s on %s\n", b.Result.ListFile, b.Node)
			}
		}
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
