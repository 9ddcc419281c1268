package cli

import (
	"cmp"
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/registry"
)

// registryCmd keeps recipe registries (git clones under
// STATE_DIR/registries): their recipes are @NAME/RECIPE, their mods found
// in sparkrun's order.
func (a *App) registryCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "registry", Short: "recipe registries: git clones under STATE_DIR/registries, pinned to a commit; @NAME/RECIPE names their recipes"}
	var ref string
	add := &cobra.Command{
		Use:   "add NAME URL [--ref R]",
		Short: "clone URL (any git URL or path) as registry NAME and check out --ref (a branch, tag or commit; default: the remote's default branch)",
		Args:  cobra.ExactArgs(2),
		RunE: a.withConfig(func(ctx context.Context, req *request) error {
			r, err := registry.Add(ctx, req.cfg.StateDir, req.args[0], req.args[1], ref)
			if err != nil {
				return err
			}
			return a.output(r, func() { fmt.Fprintf(a.Out, "registry %s: %s at %s (%s)\n", r.Name, r.URL, r.Commit, r.Path) })
		}),
	}
	add.Flags().StringVar(&ref, "ref", "", "branch, tag or commit to follow (update moves a branch to its new head; a tag or commit stays)")
	update := &cobra.Command{
		Use:   "update [NAME]",
		Short: "fetch registry NAME (every registry without NAME) and check out its ref again; prints the commit each is pinned to",
		Args:  cobra.MaximumNArgs(1),
		RunE: a.withConfig(func(ctx context.Context, req *request) error {
			names := req.args
			if len(names) == 0 {
				all, err := registry.List(ctx, req.cfg.StateDir)
				if err != nil {
					return err
				}
				for _, r := range all {
					names = append(names, r.Name)
				}
			}
			var out []registry.Registry
			for _, n := range names {
				r, err := registry.Update(ctx, req.cfg.StateDir, n)
				if err != nil {
					return err
				}
				out = append(out, r)
			}
			return a.output(out, func() { registryTable(a, out) })
		}),
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "list registries: name, URL, ref, the commit checked out, path",
		Args:  cobra.NoArgs,
		RunE: a.withConfig(func(ctx context.Context, req *request) error {
			out, err := registry.List(ctx, req.cfg.StateDir)
			if err != nil {
				return err
			}
			if out == nil {
				out = []registry.Registry{}
			}
			return a.output(out, func() { registryTable(a, out) })
		}),
	}
	remove := &cobra.Command{
		Use:   "remove NAME",
		Short: "delete registry NAME's clone",
		Args:  cobra.ExactArgs(1),
		RunE: a.withConfig(func(ctx context.Context, req *request) error {
			if err := registry.Remove(req.cfg.StateDir, req.args[0]); err != nil {
				return err
			}
			return a.output(map[string]string{"removed": req.args[0]}, func() { fmt.Fprintf(a.Out, "registry %s removed\n", req.args[0]) })
		}),
	}
	cmd.AddCommand(add, update, list, remove, a.registrySwitch(true), a.registrySwitch(false))
	return cmd
}

// registrySwitch is `registry enable NAME` (on) or `registry disable
// NAME`: a disabled registry's recipes are neither listed nor resolved,
// its clone stays.
func (a *App) registrySwitch(on bool) *cobra.Command {
	verb, short := "enable", "turn registry NAME back on: its recipes are listed and resolved again"
	if !on {
		verb, short = "disable", "turn registry NAME off: its recipes are neither listed nor resolved (@NAME/RECIPE says how to enable it); its clone stays"
	}
	return &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: a.withConfig(func(_ context.Context, req *request) error {
			changed, err := registry.Enable(req.cfg, req.args[0], on)
			if err != nil {
				return err
			}
			state := map[bool]string{true: "enabled", false: "disabled"}[on]
			return a.output(map[string]any{"registry": req.args[0], "state": state, "changed": changed}, func() {
				if changed {
					fmt.Fprintf(a.Out, "registry %s %s\n", req.args[0], state)
				} else {
					fmt.Fprintf(a.Out, "registry %s was %s already\n", req.args[0], state)
				}
			})
		}),
	}
}

func registryTable(a *App, rs []registry.Registry) {
	var rows [][]string
	for _, r := range rs {
		state := "enabled"
		if r.Disabled {
			state = "disabled"
		}
		rows = append(rows, []string{r.Name, state, r.URL, cmp.Or(r.Ref, "(default branch)"), r.Commit, r.Path})
	}
	table(a.Out, []string{"REGISTRY", "STATE", "URL", "REF", "COMMIT", "PATH"}, rows)
}
