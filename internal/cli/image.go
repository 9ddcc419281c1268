package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/workflows"
)

// laneBuild is how a stage of r builds its image when no node has it:
// its [build] on only (--node), the recipe's build node or the head.
func laneBuild(r *contract.Recipe, plan *contract.LanePlan, only string) *workflows.ImageBuild {
	if r.Build == nil {
		return nil
	}
	return &workflows.ImageBuild{Image: r.Image, Spec: *r.Build, Node: lane.BuildNode(*r, *plan, only)}
}

func (a *App) imageCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "a lane's engine image: build it from the recipe's [build]"}
	var f laneFlags
	var only string
	build := &cobra.Command{
		Use:   "build --lane L [--cluster C] [--node N]",
		Short: "build the lane's image on one node (--node, the recipe's [build] node, or the cluster's head) and move it to the lane's other nodes",
		RunE: a.withLane(&f, func(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan) error {
			if r.Build == nil {
				return fmt.Errorf("lane %s has no [build] (%s): add one (context = \"/shared/dir\" or git = URL with ref) to build its image", r.Name, r.File)
			}
			if err := laneNode(plan, only); err != nil {
				return err
			}
			b := laneBuild(r, plan, only)
			b.Force = true
			var res workflows.StageResult
			if err := a.startFollow(ctx, runSpec{ID: workflows.StageID(r.Name), Workflow: workflows.Stage, Lane: r.Name, Cluster: r.Cluster,
				Input: workflows.StageInput{Plan: *plan, Mode: workflows.StageAuto, Build: b, ImageOnly: true}}, &res); err != nil {
				return err
			}
			return a.printImageBuild(res)
		}),
	}
	f.bind(build, overrideHelp)
	build.Flags().StringVar(&only, "node", "", "build on this node of the lane")
	cmd.AddCommand(build)
	return cmd
}

// printImageBuild shows the build (its node, image ID and last log lines)
// and where the image went.
func (a *App) printImageBuild(res workflows.StageResult) error {
	return a.output(res, func() {
		if b := res.Built; b != nil {
			fmt.Fprintf(a.Out, "built on %s: %s\n", b.Node, b.ID)
			if len(b.Tail) > 0 {
				fmt.Fprintln(a.Out, "  "+strings.Join(b.Tail, "\n  "))
			}
		}
		var rows [][]string
		for _, im := range res.Images {
			from := im.From
			if from == "" {
				from = "-"
			}
			rows = append(rows, []string{im.Node, im.State, from})
		}
		table(a.Out, []string{"NODE", "IMAGE", "FROM"}, rows)
	})
}
