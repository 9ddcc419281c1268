package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
)

// keepPolicy is the policy a cutover or up hands the cluster's keeper:
// the recipe's [keep] key by key over the config's, and the probe grace.
func keepPolicy(cfg *config.Config, r *contract.Recipe) *contract.KeepPolicy {
	p := &contract.KeepPolicy{
		Interval: contract.Duration(cfg.Keep.Interval), Restarts: cfg.Keep.Restarts, Window: contract.Duration(cfg.Keep.Window),
		Grace: contract.Duration(cfg.ProbeGrace), Off: cfg.Keep.Off || r.Keep.Off,
	}
	if r.Keep.Interval > 0 {
		p.Interval = r.Keep.Interval
	}
	if r.Keep.Restarts > 0 {
		p.Restarts = r.Keep.Restarts
	}
	if r.Keep.Window > 0 {
		p.Window = r.Keep.Window
	}
	return p
}

func (a *App) keepCmd() *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "keep --cluster C off|on",
		Short: "pause (off) or resume (on) the cluster's keeper; on after a crash loop starts a fresh restart budget",
		Args:  cobra.ExactArgs(1),
		RunE: a.withClient(func(ctx context.Context, req *request) error {
			action := req.args[0]
			if action != contract.KeepPause && action != contract.KeepResume {
				return fmt.Errorf("starter keep: %q: say off (pause keeping) or on (resume)", action)
			}
			if req.cfg.Cluster(cluster) == nil {
				return fmt.Errorf("cluster %q is not in %s", cluster, req.cfg.File)
			}
			id := contract.KeeperID(cluster)
			h, err := req.env.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
				WorkflowID: id, UpdateName: contract.KeeperControlUpdate, WaitForStage: client.WorkflowUpdateStageCompleted,
				Args: []any{contract.KeeperControl{Action: action, By: "starter keep"}},
			})
			var st contract.KeeperStatus
			if err == nil {
				err = h.Get(ctx, &st)
			}
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				return exitCode(1, fmt.Errorf("cluster %s has no keeper running (%s): a successful `starter cutover` or `starter up` starts one", cluster, id))
			}
			if err != nil {
				return fmt.Errorf("keep %s on cluster %s: %w", action, cluster, err)
			}
			st.Input = nil
			return a.output(st, func() {
				fmt.Fprintf(a.Out, "%s: lane %s, %s\n", id, st.Lane, st.State)
			})
		}),
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the cluster whose keeper to pause or resume")
	_ = cmd.MarkFlagRequired("cluster")
	return cmd
}

// keepers asks each cluster's keeper how it keeps its lane; clusters
// without a running keeper are left out.
func keepers(ctx context.Context, env *control.Conn, cfg *config.Config) []contract.KeeperStatus {
	var out []contract.KeeperStatus
	for _, c := range cfg.Clusters {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := env.Client.QueryWorkflow(qctx, contract.KeeperID(c.Name), "", contract.KeeperStatusQuery)
		var st contract.KeeperStatus
		if err == nil && v.Get(&st) == nil && st.State != contract.KeeperEnded {
			st.Input = nil
			out = append(out, st)
		}
		cancel()
	}
	return out
}

// printKeepers is status's KEEPER table.
func printKeepers(a *App, ks []contract.KeeperStatus) {
	if len(ks) == 0 {
		return // no keeper: the fleet table alone, as before keepers
	}
	var rows [][]string
	for _, k := range ks {
		last := "-"
		if !k.LastCheck.IsZero() {
			last = k.LastCheck.UTC().Format("15:04:05Z")
		}
		if k.Checking {
			last = "checking (last " + last + ")"
		}
		reason := wrap(k.LastReason, reasonWidth)
		if len(reason) == 0 {
			reason = []string{"-"}
		}
		rows = append(rows, []string{k.Cluster, k.Lane, k.State, k.Health, last, fmt.Sprint(k.Restarts24h), reason[0]})
		for _, more := range reason[1:] {
			rows = append(rows, []string{"", "", "", "", "", "", more})
		}
	}
	fmt.Fprintln(a.Out)
	table(a.Out, []string{"CLUSTER", "KEPT LANE", "KEEPER", "HEALTH", "LAST CHECK", "RESTARTS 24H", "LAST REASON"}, rows)
}
