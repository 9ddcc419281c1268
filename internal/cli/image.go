package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

func (a *App) imageCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "a lane's engine image: build it from the recipe's [build]"}
	var f laneFlags
	var only, simBinary string
	var sim bool
	build := &cobra.Command{
		Use:   "build --lane L [--cluster C] [--node N] | --sim [--lane L] [--engine-sim PATH]",
		Short: "build the lane's image on one node (--node, the recipe's [build] node, or the cluster's head) and move it to the lane's other nodes",
		Long: "Builds the lane's image from its recipe's [build] on one node (--node, the [build] node, or the cluster's\n" +
			"head) and moves it to the lane's other nodes. With --sim it builds the engine-sim image instead (for a\n" +
			"lane of runtime sim: --lane, default " + SimLane + "), from scratch through that node's Docker, from the\n" +
			"release's engine-sim of the node's architecture (engine-sim/ in the release; or --engine-sim PATH, or\n" +
			"compiled from the source tree): no Go is needed on the node or here.",
		PreRunE: func(*cobra.Command, []string) error {
			if sim && f.lane == "" {
				f.lane = SimLane
			}
			if simBinary != "" && !sim {
				return fmt.Errorf("--engine-sim goes with --sim")
			}
			return nil
		},
		RunE: a.withLane(&f, func(ctx context.Context, cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan) error {
			if err := laneNode(plan, only); err != nil {
				return err
			}
			if sim {
				return a.simBuild(ctx, cfg, r, plan, only, simBinary)
			}
			if r.Build == nil {
				return fmt.Errorf("lane %s has no [build] (%s): add one (context = \"/shared/dir\" or git = URL with ref) to build its image", r.Name, r.File)
			}
			b := r.BuildFor(*plan, only)
			b.Force = true
			var res contract.StageResult
			if err := a.startFollow(ctx, runSpec{ID: contract.StageID(r.Name), Workflow: contract.WorkflowStage, Lane: r.Name, Cluster: r.Cluster,
				Input: contract.StageInput{Plan: *plan, Mode: contract.StageAuto, Build: b, ImageOnly: true}}, &res); err != nil {
				return err
			}
			return a.printImageBuild(res)
		}),
	}
	f.bind(build, overrideHelp)
	build.Flags().StringVar(&only, "node", "", "build on this node of the lane")
	build.Flags().BoolVar(&sim, "sim", false, "build the engine-sim image (a sim lane: --lane, default "+SimLane+") from the release's engine-sim; no Go needed")
	build.Flags().StringVar(&simBinary, "engine-sim", "", "with --sim: this static engine-sim program (linux, the node's architecture)")
	cmd.AddCommand(build)
	return cmd
}

// printImageBuild shows the build (its node, image ID and last log lines)
// and where the image went.
func (a *App) printImageBuild(res contract.StageResult) error {
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

// laneImages maps each lane's recipe image to the lanes naming it.
func laneImages(set *config.RecipeSet) map[string][]string {
	out := map[string][]string{}
	for _, r := range set.Recipes {
		if r.Image != "" {
			out[r.Image] = append(out[r.Image], r.Name)
		}
	}
	return out
}

func (a *App) imagesCmd() *cobra.Command {
	var nodes []string
	cmd := &cobra.Command{
		Use:   "images [--node N]...",
		Short: "list every node's images: the lanes' images, their size and last use, and what else is there",
		Long: "Runs the Disk workflow with images: each node's worker lists its Docker's images, names the lanes\n" +
			"whose recipe image each is, the containers (running or not) using it, and when it was last used\n" +
			"(a container created from it, else when it was loaded, built or pulled). `disk prune --lru` may\n" +
			"remove the ones no lane names and no container uses.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, id, err := a.runDisk(cmd, nodes, nil, true)
			if err != nil {
				return err
			}
			return a.printImages(res, id)
		},
	}
	cmd.Flags().StringArrayVar(&nodes, "node", nil, "only this node (repeatable)")
	return cmd
}

// printImages prints each node's images; exit 1 when a node did not answer.
func (a *App) printImages(res contract.DiskResult, id string) error {
	type nodeImages struct {
		Node   string                 `json:"node"`
		Error  string                 `json:"error,omitempty"`
		Images []contract.ImageListed `json:"images"`
	}
	var out []nodeImages
	var rows [][]string
	var failures []string
	for _, n := range res.Nodes {
		ni := nodeImages{Node: n.Node, Error: n.Error, Images: []contract.ImageListed{}}
		if n.Disk != nil {
			ni.Images = append(ni.Images, n.Disk.Images...)
			if n.Disk.ImageError != "" {
				ni.Error = n.Disk.ImageError
			}
		}
		if ni.Error != "" {
			failures = append(failures, n.Node+": "+ni.Error)
			rows = append(rows, []string{n.Node, "-", "-", "-", "-", "error: " + ni.Error})
		}
		for _, l := range ni.Images {
			rows = append(rows, []string{n.Node, imageName(l), contract.HumanBytes(l.Size), when(l.LastUsed), usedBy(l), strings.TrimPrefix(l.ID, "sha256:")[:12]})
		}
		out = append(out, ni)
	}
	if err := a.output(map[string]any{"workflow_id": id, "nodes": out}, func() {
		table(a.Out, []string{"NODE", "IMAGE", "SIZE", "LAST USED", "USED BY", "ID"}, rows)
	}); err != nil {
		return err
	}
	if len(failures) > 0 {
		return exitCode(1, errors.New(strings.Join(failures, "; ")))
	}
	return nil
}

func imageName(l contract.ImageListed) string {
	if len(l.Tags) == 0 {
		return "<untagged>"
	}
	return strings.Join(l.Tags, ", ")
}

// usedBy says why an image stays: its lanes and containers, or "-".
func usedBy(l contract.ImageListed) string {
	var parts []string
	if len(l.Lanes) > 0 {
		parts = append(parts, "lane "+strings.Join(l.Lanes, ", "))
	}
	if l.Containers > 0 {
		parts = append(parts, fmt.Sprintf("%d containers (%d running)", l.Containers, l.Running))
	}
	if len(parts) == 0 {
		return "- (unused: disk prune --lru may remove it)"
	}
	return strings.Join(parts, "; ")
}

// printImagePrune says what an LRU prune did to a node's images.
func (a *App) printImagePrune(node string, p *contract.ImagePrune) {
	if p == nil {
		return
	}
	if p.Error != "" {
		fmt.Fprintf(a.Out, "%s: images: %s\n", node, p.Error)
		return
	}
	verb := "removed"
	if p.DryRun {
		verb = "would remove"
	}
	for _, l := range p.Removed {
		fmt.Fprintf(a.Out, "%s: %s image %s (%s, last used %s)\n", node, verb, imageName(l), contract.HumanBytes(l.Size), when(l.LastUsed))
	}
	for _, k := range p.Kept {
		fmt.Fprintf(a.Out, "%s: %s\n", node, k)
	}
	fmt.Fprintf(a.Out, "%s: %s (Docker) free %s -> %s\n", node, p.Root, contract.HumanBytes(p.FreeBefore), contract.HumanBytes(p.FreeAfter))
}
