package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/staging"
	"github.com/sparklane/sparklane/workflows"
)

func (a *App) statusCmd() *cobra.Command {
	var lane string
	var pickup time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "probe the fleet: per node free, occupied (lane X) or unreachable (why)",
		Long: "Runs the FleetProbe workflow: every node's worker reports its containers and free space on its\n" +
			"roots (a worker that does not pick up within --pickup makes its node unreachable), and SSH is\n" +
			"checked with the host key verified. With --lane, the lane's nodes must be usable: if not, the probe\n" +
			"runs once more after probe_grace and then fails listing every node's state.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			cfg, err := a.config()
			if err != nil {
				return err
			}
			in := workflows.FleetProbeInput{Grace: cfg.ProbeGrace, PickupTimeout: pickup}
			for _, n := range cfg.Nodes {
				in.Nodes = append(in.Nodes, n.Name)
			}
			spec := runSpec{ID: fmt.Sprintf("fleet-probe/%d", time.Now().UnixNano()), Workflow: workflows.FleetProbe}
			if lane != "" {
				_, r, plan, err := a.lane(lane, nil)
				if err != nil {
					return err
				}
				in.Lane, in.Require = r.Name, nodesOf(plan)
				spec.Lane, spec.Cluster = r.Name, r.Cluster
				spec.Retry = workflows.ProbeRetryPolicy(cfg.ProbeGrace)
			}
			spec.Input = in
			run, err := a.start(ctx, spec)
			if err != nil {
				return err
			}
			var res workflows.FleetProbeResult
			err = run.Get(ctx, &res)
			if err != nil && !appErrorDetails(err, &res) {
				return err
			}
			if a.JSON {
				if perr := a.printJSON(res); perr != nil {
					return perr
				}
			} else {
				printFleet(a, cfg, res)
			}
			if err != nil {
				return exitCode(1, fmt.Errorf("%s", rootMessage(err)))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&lane, "lane", "", "require the nodes of this lane")
	cmd.Flags().DurationVar(&pickup, "pickup", 3*time.Second, "how long a node worker may take to answer before its node is unreachable")
	return cmd
}

func nodesOf(p *config.LanePlan) []string {
	var out []string
	for _, n := range p.Nodes {
		out = append(out, n.Node)
	}
	return out
}

func printFleet(a *App, cfg *config.Config, res workflows.FleetProbeResult) {
	var rows [][]string
	for _, n := range res.Nodes {
		var roots []string
		for _, r := range n.Roots {
			if r.Error != "" {
				roots = append(roots, r.Root+" ?")
				continue
			}
			roots = append(roots, fmt.Sprintf("%s %s free", r.Root, staging.HumanBytes(r.Free)))
		}
		rows = append(rows, []string{n.Node, n.String(), dash(n.SSH), dash(n.Worker), dash(strings.Join(roots, ", "))})
	}
	table(a.Out, []string{"NODE", "STATE", "SSH", "WORKER", "ROOTS"}, rows)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
