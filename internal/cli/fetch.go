package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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
from hf_endpoint, else this shell's HF_ENDPOINT (it travels with the run;
the token does not), else the worker's HF_ENDPOINT, else the public Hub —
the endpoint is printed before anything starts — with the token in
hf_token_file (else the worker's HF_TOKEN). An endpoint whose listing
carries no file metadata (a mirror without ?blobs=true) is read as
'hf download' reads it: a HEAD per file. A killed worker or a dropped
connection resumes from the partial files on the NAS. Repeating the
command while the same fetch runs follows that run.`,
		RunE: a.withLane(&f, func(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan) error {
			fp, err := a.fetchPlan(cfg, r, lane.FetchOptions{Repo: repo})
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
				if res.Error != "" {
					// The dry run completed with what the fetch would stop with.
					return exitCode(1, errors.New(res.Error))
				}
				return a.printFetch(*fp, res)
			}
			if err := a.startFollow(ctx, runSpec{ID: contract.FetchID(r.Name), Workflow: contract.WorkflowFetch, Input: in, Lane: r.Name, Cluster: plan.Cluster, FollowSame: true}, &res); err != nil {
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

// fetchPlan is lane.FetchPlan with this shell's HF_ENDPOINT (the plan's
// endpoint when the config sets no hf_endpoint); before anything starts it
// prints which endpoint the fetch will use, and why.
func (a *App) fetchPlan(cfg *config.Config, r *contract.Recipe, o lane.FetchOptions) (*contract.FetchPlan, error) {
	getenv := a.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	o.Endpoint = getenv("HF_ENDPOINT")
	fp, err := lane.FetchPlan(cfg, r, o)
	if err != nil || fp == nil {
		return fp, err
	}
	fmt.Fprintln(a.Out, endpointLine(cfg, fp, o.Endpoint))
	return fp, nil
}

// endpointLine says where a fetch plan downloads from and why: the
// user's hf_endpoint or HF_ENDPOINT, or, when neither is set, what the
// fetching worker will use.
func endpointLine(cfg *config.Config, fp *contract.FetchPlan, env string) string {
	where := fetchWhere(fp)
	env = strings.TrimRight(strings.TrimSpace(env), "/")
	switch {
	case cfg.HFEndpoint != "":
		line := fmt.Sprintf("fetch endpoint: %s (hf_endpoint in %s), fetching on %s", fp.Endpoint, cfg.File, where)
		if env != "" && env != fp.Endpoint {
			line += fmt.Sprintf("; this shell's HF_ENDPOINT=%s is not used: hf_endpoint comes first", env)
		}
		return line
	case fp.Endpoint != "":
		return fmt.Sprintf("fetch endpoint: %s (this shell's HF_ENDPOINT, sent with the run; the token is not), fetching on %s", fp.Endpoint, where)
	}
	return fmt.Sprintf("fetch endpoint: %s's HF_ENDPOINT if its service sets one, else the public Hub %s (neither hf_endpoint nor HF_ENDPOINT is set here)", where, contract.DefaultHubEndpoint)
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
		defer printHeadNotes(a, res)
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

// printHeadNotes says, under the table, which repos came from an endpoint
// whose listing carries no file metadata, and from where.
func printHeadNotes(a *App, res contract.FetchResult) {
	for _, r := range res.Repos {
		if r.HeadFiles > 0 {
			fmt.Fprintf(a.Out, "%s: %s lists no file metadata (no ?blobs=true): the size and etag of %d files were read by a HEAD each, as 'hf download' reads them\n", r.Repo, r.Endpoint, r.HeadFiles)
		}
	}
}
