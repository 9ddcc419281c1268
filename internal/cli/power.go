package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/lane"
)

func (a *App) powerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "power", Short: "power nodes and network gear on and off (graceful shutdown, then the outlet relay)"}
	for _, action := range []string{contract.PowerOff, contract.PowerOn} {
		action := action
		var cluster string
		var force bool
		var wait time.Duration
		c := &cobra.Command{
			Use:   action + " NODE|DEVICE... | --cluster C",
			Short: map[string]string{"off": "graceful shutdown → wait until unreachable → relay off; network gear ([[devices]] with behind) last, once every node behind it is off", "on": "relay on or Wake-on-LAN → wait until SSH answers and the node worker polls"}[action],
			RunE: a.withFleet(func(ctx context.Context, req *request) error {
				cfg := req.cfg
				targets := req.args
				if cluster != "" {
					cl := cfg.Cluster(cluster)
					if cl == nil {
						return fmt.Errorf("cluster %q is not in %s", cluster, cfg.File)
					}
					targets = append(targets, cl.Nodes...)
					if action == contract.PowerOff {
						// The cluster's network gear goes too, after its nodes.
						for _, d := range cfg.Devices {
							if slices.ContainsFunc(d.Behind, func(n string) bool { return slices.Contains(cl.Nodes, n) }) && !slices.Contains(targets, d.Name) {
								targets = append(targets, d.Name)
							}
						}
					}
				}
				if len(targets) == 0 {
					return fmt.Errorf("name nodes or devices, or --cluster")
				}
				for _, t := range targets {
					known := cfg.Node(t) != nil
					for _, d := range cfg.Devices {
						known = known || d.Name == t
					}
					if !known {
						return fmt.Errorf("%q is neither a [[nodes]] nor a [[devices]] entry of %s", t, cfg.File)
					}
				}
				in := contract.PowerInput{Action: action, Targets: targets, Force: force, WaitBound: contract.Duration(wait), Gateways: lane.GatewayQueues(cfg, "")}
				if action == contract.PowerOff {
					// Network gear goes off last, after the nodes behind it.
					in.Targets, in.Gear = splitGear(cfg, targets)
				}
				run, err := a.start(ctx, runSpec{ID: contract.PowerID(action, strings.Join(targets, ",")), Workflow: contract.WorkflowPower, Input: in})
				if err != nil {
					return err
				}
				var res contract.PowerResult
				err = a.follow(ctx, run, &res)
				if err != nil && !appErrorDetails(err, &res) {
					return runFailed(err)
				}
				if perr := a.output(res, func() { a.printPower(res) }); perr != nil {
					return perr
				}
				return runFailed(err)
			}),
		}
		c.Flags().StringVar(&cluster, "cluster", "", "every node of this cluster (power off: and the network gear its nodes sit behind, last)")
		c.Flags().DurationVar(&wait, "wait", 5*time.Minute, "how long to wait for a target to go down / come up")
		if action == contract.PowerOff {
			c.Flags().BoolVar(&force, "force", false, "cut the relay even if the target still answers after its shutdown")
		}
		cmd.AddCommand(c)
	}
	return cmd
}

// printPower says each target's state after a power run, with its error
// and warnings.
func (a *App) printPower(res contract.PowerResult) {
	for _, r := range res.Targets {
		fmt.Fprintf(a.Out, "%s: %s", r.Target, r.State)
		if r.Error != "" {
			fmt.Fprintf(a.Out, " — %s", r.Error)
		}
		fmt.Fprintln(a.Out)
		for _, w := range r.Warnings {
			fmt.Fprintf(a.Out, "  WARNING: %s\n", w)
		}
	}
}

// splitGear separates the [[devices]] that have nodes behind them (network
// gear, switched off after those nodes) from the other targets, keeping
// the order given.
func splitGear(cfg *config.Config, targets []string) ([]string, []contract.PowerGear) {
	var rest []string
	var gear []contract.PowerGear
	for _, t := range targets {
		i := slices.IndexFunc(cfg.Devices, func(d config.Device) bool { return d.Name == t })
		if i >= 0 && len(cfg.Devices[i].Behind) > 0 {
			gear = append(gear, contract.PowerGear{Name: t, Behind: cfg.Devices[i].Behind})
			continue
		}
		rest = append(rest, t)
	}
	return rest, gear
}
