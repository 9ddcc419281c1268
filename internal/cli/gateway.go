package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/lane"
)

// gatewayLabel names a gateway in output ("" is the one [gateway]).
func gatewayLabel(name string) string {
	if name == "" {
		return "[gateway]"
	}
	return name
}

// drainLine is one gateway's drain of a lane, as a line.
func drainLine(d contract.GatewayDrainResult) string {
	return fmt.Sprintf("gateway %s drained lane %s: %d in flight, %d finished, %d cut off (%.1fs)",
		gatewayLabel(d.Gateway), d.Lane, d.InFlight, d.Finished, d.CutOff, d.Seconds)
}

// gatewayTables are the route tables of the config's gateways as they
// keep them on disk; a gateway that never ran has an empty one, and a
// file that does not read is an error naming it.
func gatewayTables(cfg *config.Config) ([]contract.GatewayTableFile, error) {
	var out []contract.GatewayTableFile
	for _, g := range cfg.Gateways() {
		t := contract.GatewayTableFile{Gateway: g.Name}
		p := lane.GatewayStateFile(cfg, g)
		b, err := os.ReadFile(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("gateway %s: read its table %s: %w", gatewayLabel(g.Name), p, err)
		default:
			if err := json.Unmarshal(b, &t); err != nil {
				return nil, fmt.Errorf("gateway %s: its table %s does not read (%v): the gateway rewrites it at its next change", gatewayLabel(g.Name), p, err)
			}
			t.Gateway = g.Name
		}
		out = append(out, t)
	}
	return out, nil
}

func (a *App) gatewayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "the lanes' one client-facing address: its routes (`worker gateway` runs it)",
	}
	routes := &cobra.Command{
		Use:   "routes",
		Short: "every gateway's routes: cluster, lane, head, names, state and what it holds",
		RunE: a.withConfig(func(_ context.Context, req *request) error {
			cfg := req.cfg
			if len(cfg.Gateways()) == 0 {
				return fmt.Errorf("%s has no [gateway] table: add one (listen = \"127.0.0.1:8080\") then `starter control start` starts it (or run `worker gateway`)", cfg.File)
			}
			tables, err := gatewayTables(cfg)
			if err != nil {
				return err
			}
			return a.output(tables, func() { printGateways(a, cfg, tables) })
		}),
	}
	cmd.AddCommand(routes)
	return cmd
}

// printGateways prints each gateway's listen address and its routes.
func printGateways(a *App, cfg *config.Config, tables []contract.GatewayTableFile) {
	for _, t := range tables {
		g := cfg.FindGateway(t.Gateway)
		listen := ""
		if g != nil {
			listen = " at " + g.Listen
		}
		as := ""
		if !t.Written.IsZero() {
			as = ", table as of " + t.Written.Local().Format(time.DateTime)
		}
		fmt.Fprintf(a.Out, "gateway %s%s (%s%s)\n", gatewayLabel(t.Gateway), listen, gatewayProcess(cfg, t.Gateway), as)
		if len(t.Routes) == 0 {
			fmt.Fprintln(a.Out, "  no routes yet: a cutover or up of a lane it fronts sets one")
			continue
		}
		var rows [][]string
		for _, r := range t.Routes {
			held := "-"
			if r.Held > 0 {
				held = fmt.Sprint(r.Held)
			}
			rows = append(rows, []string{r.Cluster, dash(r.Lane), dash(r.BaseURL), dash(strings.Join(r.Names, ", ")), r.State, held, dash(r.Why)})
		}
		table(a.Out, []string{"CLUSTER", "LANE", "HEAD", "NAMES", "STATE", "HELD", "WHY"}, rows)
	}
}

// gatewayStatus is status's gateway section: the tables, or why they do
// not read (status goes on without them).
func gatewayStatus(cfg *config.Config) ([]contract.GatewayTableFile, string) {
	t, err := gatewayTables(cfg)
	if err != nil {
		return nil, err.Error()
	}
	return t, ""
}

// gatewayProcess says whether gateway name's process runs, and its pid.
func gatewayProcess(cfg *config.Config, name string) string {
	o, ok := control.FindFile(control.GatewayLockPath(cfg.StateDir, name))
	if !ok {
		return "not running: the control service starts it, or its systemd unit"
	}
	return fmt.Sprintf("pid %d", o.PID)
}

// gatewayQueues is lane.GatewayQueues, for commands whose own variables
// are named lane.
func gatewayQueues(cfg *config.Config, cluster string) []string {
	return lane.GatewayQueues(cfg, cluster)
}
