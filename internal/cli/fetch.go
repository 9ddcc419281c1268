package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/lane"
)

func (a *App) fetchCmd() *cobra.Command {
	var f laneFlags
	var repo string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "fetch --lane L [--repo R] [--dry-run]",
		Short: "download a lane's hub-mirror repos from the Hub into the NAS at their pinned revision (resumable, verified)",
		Long: `fetch downloads each repo of the lane's hub-mirror blocks at the block's
revision into the block's src (the NAS hub root), in the Hugging Face cache
layout, skipping what the block's skip globs skip. It runs on the worker
fetch_node names (a node that mounts the NAS, or the control service),
from hf_endpoint (else the worker's HF_ENDPOINT, else the public Hub), with
the token in hf_token_file (else the worker's HF_TOKEN). A killed worker or
a dropped connection resumes from the partial files on the NAS.`,
		RunE: a.withLane(&f, func(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan) error {
			fp, err := lane.FetchPlan(cfg, r, lane.FetchOptions{Repo: repo})
			if err != nil {
				return err
			}
			if fp == nil {
				return fmt.Errorf("lane %s has no hub-mirror blocks to fetch (%s)", r.Name, r.File)
			}
			budget, err := outageBudget(cfg, r)
			if err != nil {
				return err
			}
			in := contract.FetchInput{Plan: *fp, DryRun: dryRun, OutageBudget: contract.Duration(budget)}
			var res contract.FetchResult
			if dryRun {
				id := fmt.Sprintf("dry-run/fetch/%s/%d", r.Name, time.Now().UnixNano())
				run, err := a.start(ctx, runSpec{ID: id, Workflow: contract.WorkflowFetch, Input: in, Lane: r.Name, Cluster: plan.Cluster})
				if err != nil {
					return err
				}
				if err := runFailed(run.Get(ctx, &res)); err != nil {
					return err
				}
				return a.printFetch(*fp, res)
			}
			if err := a.startFollow(ctx, runSpec{ID: contract.FetchID(r.Name), Workflow: contract.WorkflowFetch, Input: in, Lane: r.Name, Cluster: plan.Cluster}, &res); err != nil {
				return err
			}
			return a.printFetch(*fp, res)
		}),
	}
	f.bind(cmd, overrideHelp)
	cmd.Flags().StringVar(&repo, "repo", "", "fetch only this repo (org/name) of the lane's hub-mirror blocks")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list each repo's revision, commit, files and bytes after the skip globs, and what the NAS lacks; download nothing")
	return cmd
}

// fetchJSON is the stable JSON of `starter fetch --json`.
type fetchJSON struct {
	Lane string `json:"lane"`
	// Node is the worker that fetched: a node's name or "control".
	Node   string                     `json:"node"`
	DryRun bool                       `json:"dry_run,omitempty"`
	Repos  []contract.FetchRepoResult `json:"repos"`
}

func (a *App) printFetch(p contract.FetchPlan, res contract.FetchResult) error {
	return a.printFetchResult(fetchWhere(&p), res)
}

// printFetchResult prints what a Fetch run did on node (its worker).
func (a *App) printFetchResult(node string, res contract.FetchResult) error {
	out := fetchJSON{Lane: res.Lane, Node: node, Repos: []contract.FetchRepoResult{}}
	var rows [][]string
	dry := false
	for _, r := range res.Repos {
		out.Repos = append(out.Repos, r)
		dry = dry || r.DryRun
		commit := r.Commit
		if len(commit) > 12 {
			commit = commit[:12]
		}
		row := []string{r.Repo, r.Revision, commit, fmt.Sprint(r.Files), contract.HumanBytes(r.Bytes), fmt.Sprintf("%d (%s)", r.SkippedFiles, contract.HumanBytes(r.SkippedBytes))}
		if r.DryRun {
			row = append(row, fmt.Sprint(r.MissingFiles), contract.HumanBytes(r.MissingBytes))
		} else {
			row = append(row, contract.HumanBytes(r.DownloadedBytes), contract.HumanBytes(r.ResumedBytes), fmt.Sprint(r.ReusedFiles), fmt.Sprintf("%.1f", r.Seconds))
		}
		rows = append(rows, row)
	}
	out.DryRun = dry
	return a.output(out, func() {
		head := []string{"REPO", "REVISION", "COMMIT", "FILES", "BYTES", "SKIPPED"}
		if dry {
			fmt.Fprintf(a.Out, "dry run: nothing downloaded; fetch node %s\n", node)
			head = append(head, "TO FETCH", "BYTES TO FETCH")
		} else {
			head = append(head, "DOWNLOADED", "RESUMED", "REUSED", "SECONDS")
		}
		table(a.Out, head, rows)
	})
}
