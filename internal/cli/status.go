package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/lane"
)

func (a *App) statusCmd() *cobra.Command {
	var lane string
	var nodes []string
	var pickup time.Duration
	cmd := &cobra.Command{
		Use:   "status [--lane L] [--node N]...",
		Short: "probe the fleet: per node free, occupied (lane X) or unreachable (why); exit 1 when a node asked about is not usable",
		Long: "Runs the FleetProbe workflow: every node's worker reports its containers and free space on its\n" +
			"roots (a worker that does not pick up within --pickup makes its node unreachable), and SSH is\n" +
			"checked with the host key verified. With --lane, the lane's nodes must be usable: if not, the probe\n" +
			"runs once more after probe_grace and then fails listing every node's state. With --node (repeatable)\n" +
			"the named nodes must be usable (free or occupied), else the exit code is 1.",
		RunE: a.withFleet(func(ctx context.Context, req *request) error {
			cfg := req.cfg
			in := contract.FleetProbeInput{Grace: contract.Duration(cfg.ProbeGrace), PickupTimeout: contract.Duration(pickup)}
			all, err := knownNodes(cfg, nodes)
			if err != nil {
				return err
			}
			in.Nodes = all
			spec := runSpec{ID: fmt.Sprintf("fleet-probe/%d", time.Now().UnixNano()), Workflow: contract.WorkflowFleetProbe}
			if lane != "" {
				_, r, plan, err := a.lane(lane, nil)
				if err != nil {
					return err
				}
				in.Lane, in.Require = r.Name, nodesOf(plan)
				spec.Lane, spec.Cluster = r.Name, r.Cluster
				spec.Retry = reprobePolicy(cfg.ProbeGrace)
			}
			spec.Input = in
			run, err := a.start(ctx, spec)
			if err != nil {
				return err
			}
			var res contract.FleetProbeResult
			err = run.Get(ctx, &res)
			if err != nil && !appErrorDetails(err, &res) {
				return err
			}
			workerHints(cfg, res.Nodes)
			rememberMemory(a, cfg, res.Nodes)
			var failure string
			if err != nil {
				failure = rootMessage(err)
			} else if bad := unusable(res, nodes); len(bad) > 0 {
				failure = fmt.Sprintf("not usable: %s", strings.Join(bad, "; "))
			}
			var ks []contract.KeeperStatus
			var cs []cutoverRunning
			if env, cerr := a.connect(ctx); cerr == nil {
				ks = keepers(ctx, env, cfg)
				cs = cutoversRunning(ctx, env, cfg)
			}
			out := statusJSON{FleetProbeResult: res, Keepers: ks, Cutovers: cs, Error: failure}
			out.Gateways, out.GatewayError = gatewayStatus(cfg)
			if perr := a.output(out, func() {
				printFleet(a, cfg, res)
				printKeepers(a, ks)
				printCutoversRunning(a, cs)
				if len(out.Gateways) > 0 || out.GatewayError != "" {
					fmt.Fprintln(a.Out)
					printGateways(a, cfg, out.Gateways)
					if out.GatewayError != "" {
						fmt.Fprintln(a.Out, "gateway:", out.GatewayError)
					}
				}
			}); perr != nil {
				return perr
			}
			if failure != "" {
				return exitCode(1, errors.New(failure))
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&lane, "lane", "", "require the nodes of this lane")
	cmd.Flags().StringArrayVar(&nodes, "node", nil, "require this node to be usable (repeatable)")
	cmd.Flags().DurationVar(&pickup, "pickup", 3*time.Second, "how long a node worker may take to answer before its node is unreachable")
	return cmd
}

// statusJSON is `starter status --json`: the probe result, plus the reason
// the command fails (a required node not usable) so scripts need not
// parse stderr.
type statusJSON struct {
	contract.FleetProbeResult
	// Keepers are the clusters' keepers: kept lane, health, last check,
	// restarts in the last 24h and the last reason.
	Keepers []contract.KeeperStatus `json:"keepers,omitempty"`
	// Cutovers are the cutovers under way: the lane they bring and the
	// steps running now (a stage ahead beside the serving lane shows here).
	Cutovers []cutoverRunning `json:"cutovers,omitempty"`
	// Gateways are the gateways' route tables (GatewayError: one did
	// not read).
	Gateways     []contract.GatewayTableFile `json:"gateways,omitempty"`
	GatewayError string                      `json:"gateway_error,omitempty"`
	Error        string                      `json:"error,omitempty"`
}

// workerHints replaces the probe's hint for a node whose worker does not
// poll (its typed Worker state) with the way to start it that fits the
// node (startWorkerHint).
func workerHints(cfg *config.Config, nodes []contract.NodeState) {
	for i, n := range nodes {
		if n.Worker == "not polling" {
			nodes[i].Why = startWorkerHint(cfg, n.Node)
		}
	}
}

// unusable lists "node: state (why)" for each wanted node that is neither
// free nor occupied.
func unusable(res contract.FleetProbeResult, want []string) []string {
	var bad []string
	for _, w := range want {
		for _, n := range res.Nodes {
			if n.Node == w && n.State != contract.NodeFree && n.State != contract.NodeOccupied {
				bad = append(bad, n.Node+": "+n.String())
			}
		}
	}
	return bad
}

func nodesOf(p *contract.LanePlan) []string {
	var out []string
	for _, n := range p.Nodes {
		out = append(out, n.Node)
	}
	return out
}

// reasonWidth is where the REASON column wraps: a reason is often a
// whole error message, and one 260-character cell makes the table unreadable.
const reasonWidth = 60

func printFleet(a *App, cfg *config.Config, res contract.FleetProbeResult) {
	var rows [][]string
	for _, n := range res.Nodes {
		var roots []string
		for _, r := range n.Roots {
			if r.Error != "" {
				roots = append(roots, r.Root+" ?")
				continue
			}
			roots = append(roots, fmt.Sprintf("%s %s free", r.Root, contract.HumanBytes(r.Free)))
		}
		state := n.State
		if n.State == contract.NodeOccupied {
			state = n.String()
		}
		reason := wrap(n.Why, reasonWidth)
		if len(reason) == 0 {
			reason = []string{"-"}
		}
		mem := "-"
		if n.Memory > 0 {
			mem = lane.MemoryGB(n.Memory)
		}
		rows = append(rows, []string{n.Node, state, dash(n.SSH), dash(n.Worker), mem, dash(strings.Join(roots, ", ")), reason[0]})
		for _, more := range reason[1:] {
			rows = append(rows, []string{"", "", "", "", "", "", more})
		}
	}
	table(a.Out, []string{"NODE", "STATE", "SSH", "WORKER", "MEMORY", "ROOTS", "REASON"}, rows)
}

// rememberMemory records the memory the nodes' workers reported under
// state_dir, where the memory fit of recipe check and cutover reads it
// (a node's gpu_memory in the config wins). Failing to write it costs
// only that record, so it is a warning.
func rememberMemory(a *App, cfg *config.Config, nodes []contract.NodeState) {
	mem := map[string]int64{}
	for _, n := range nodes {
		mem[n.Node] = n.Memory
	}
	if err := lane.RecordNodeMemory(cfg.StateDir, mem); err != nil {
		fmt.Fprintf(a.Err, "warning: record node memory under %s: %v\n", cfg.StateDir, err)
	}
}

// wrap breaks s into lines of at most width runes at spaces (a longer
// word gets a line of its own).
func wrap(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len([]rune(line))+1+len([]rune(w)) <= width:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// reprobePolicy is "re-probe once before bail" for a fleet probe the
// starter runs: contract.ReprobeAttempts attempts, grace apart (0:
// contract.DefaultGrace), as a cutover's own probe retries.
func reprobePolicy(grace time.Duration) *temporal.RetryPolicy {
	if grace <= 0 {
		grace = contract.DefaultGrace
	}
	return &temporal.RetryPolicy{InitialInterval: grace, BackoffCoefficient: 1, MaximumAttempts: contract.ReprobeAttempts}
}
