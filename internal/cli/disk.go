package cli

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// diskBlocks are every lane's [[staging]] blocks, one per dst (lanes that
// share a dst share the block). Every node is asked about every block: a
// block's dst is the same path on every node, and a lane staged once on
// another cluster still occupies the disk.
func diskBlocks(set *config.RecipeSet) []contract.DiskBlock {
	byDst := map[string]int{}
	var out []contract.DiskBlock
	for _, r := range set.Recipes {
		for _, s := range r.Staging {
			if i, ok := byDst[s.Dst]; ok {
				out[i].Lanes = append(out[i].Lanes, r.Name)
				continue
			}
			b := contract.DiskBlock{Lanes: []string{r.Name}, ID: s.ID, Kind: s.Kind, Dst: s.Dst}
			for _, e := range s.Exports {
				b.Exports = append(b.Exports, e.Path)
			}
			byDst[s.Dst] = len(out)
			out = append(out, b)
		}
	}
	for i := range out {
		sort.Strings(out[i].Lanes)
	}
	return out
}

// diskRoom is what a stage may prune: every lane's blocks (so a block
// short of min_free names the lanes that would free enough), and whether
// it prunes them itself (--make-room).
func (a *App) diskRoom(makeRoom bool) (*contract.DiskRoom, error) {
	_, set, err := a.recipeSet()
	if err != nil {
		return nil, err
	}
	return &contract.DiskRoom{Blocks: diskBlocks(set), MakeRoom: makeRoom}, nil
}

// runDisk runs the Disk workflow on the chosen nodes.
// With images (starter images, disk prune --lru) the nodes list their
// images too, each lane's recipe image named by its lanes.
func (a *App) runDisk(cmd *cobra.Command, nodes []string, prune *contract.PruneSpec, images bool) (contract.DiskResult, string, error) {
	var res contract.DiskResult
	if err := a.requireFleet(); err != nil {
		return res, "", err
	}
	cfg, set, err := a.recipeSet()
	if err != nil {
		return res, "", err
	}
	all, err := knownNodes(cfg, nodes)
	if err != nil {
		return res, "", err
	}
	if len(nodes) == 0 {
		nodes = all
	}
	if prune != nil && len(prune.Lanes) > 0 {
		for i, l := range prune.Lanes {
			r, err := config.Resolve(set.Recipes, l)
			if err != nil {
				return res, "", err
			}
			prune.Lanes[i] = r.Name
		}
	}
	blocks := diskBlocks(set)
	in := contract.DiskInput{Nodes: nodes, Blocks: map[string][]contract.DiskBlock{}, Prune: prune}
	if images {
		in.Images = laneImages(set)
	}
	for _, n := range nodes {
		in.Blocks[n] = blocks
	}
	id := fmt.Sprintf("disk/%d", time.Now().UnixNano())
	if prune != nil {
		id = fmt.Sprintf("disk-prune/%d", time.Now().UnixNano())
	}
	run, err := a.start(cmd.Context(), runSpec{ID: id, Workflow: contract.WorkflowDisk, Input: in})
	if err != nil {
		return res, "", err
	}
	if err := run.Get(cmd.Context(), &res); err != nil {
		return res, id, errors.New(rootMessage(err))
	}
	for i, n := range res.Nodes {
		if n.Disk == nil && n.Error != "" && a.queueIdle(cmd.Context(), n.Node) {
			res.Nodes[i].Error = startWorkerHint(cfg, n.Node)
		}
	}
	return res, id, nil
}

func (a *App) diskCmd() *cobra.Command {
	var nodes []string
	cmd := &cobra.Command{
		Use:   "disk [--node N]...",
		Short: "list every staged block of every lane per node and root: bytes on disk, last served, last verified",
		Long: "Runs the Disk workflow: each node's worker reads its own roots (beneath them only) for the\n" +
			"[[staging]] blocks of every lane's recipe: bytes on disk, when a serve last mounted the block,\n" +
			"when its ledger last verified it. Blocks of lanes running now are marked RUNNING (never pruned).",
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, id, err := a.runDisk(cmd, nodes, nil, false)
			if err != nil {
				return err
			}
			return a.printDisk(res, id, false)
		},
	}
	cmd.Flags().StringArrayVar(&nodes, "node", nil, "only this node (repeatable)")
	var lanes []string
	var lru, dryRun, pruneImages bool
	var free string
	prune := &cobra.Command{
		Use:   "prune --lane L | --lru --free SIZE [--dry-run] [--node N]...",
		Short: "remove whole staged blocks: a lane's, or least recently served first until each root has SIZE free",
		Long: "Removes whole [[staging]] blocks beneath the node roots only (links inside a block are removed,\n" +
			"never followed). Never a block of a lane running on any node, nor one another kept lane shares\n" +
			"(with --lane). --lru takes, per node root, never-served blocks first, then the least recently\n" +
			"served, until the root has --free bytes free. The next stage of a pruned lane copies it again.\n" +
			"--lru also removes images no lane's recipe names and no container (running or not) uses, least\n" +
			"recently used first, until Docker's data root has --free bytes free (--images=false: blocks only).",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (len(lanes) > 0) == lru {
				return errors.New("say what to prune: --lane L (repeatable) or --lru --free SIZE")
			}
			spec := &contract.PruneSpec{Lanes: lanes, LRU: lru, DryRun: dryRun}
			if lru {
				if free == "" {
					return errors.New("--lru needs --free SIZE (the free space each root should reach, e.g. 200G)")
				}
				n, err := config.ParseSize(free)
				if err != nil {
					return fmt.Errorf("--free: %w", err)
				}
				spec.Free = n
			}
			spec.Images = lru && pruneImages
			res, id, err := a.runDisk(cmd, nodes, spec, spec.Images)
			if err != nil {
				return err
			}
			return a.printDisk(res, id, true)
		},
	}
	prune.Flags().StringArrayVar(&lanes, "lane", nil, "remove this lane's blocks (repeatable)")
	prune.Flags().BoolVar(&lru, "lru", false, "remove least recently served blocks first, until --free is reached")
	prune.Flags().StringVar(&free, "free", "", "with --lru: the free space each root should reach (200G)")
	prune.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be removed; remove nothing")
	prune.Flags().BoolVar(&pruneImages, "images", true, "with --lru: also remove images no lane names and no container (running or not) uses, least recently used first, until Docker's data root has --free bytes free")
	prune.Flags().StringArrayVar(&nodes, "node", nil, "only this node (repeatable)")
	cmd.AddCommand(prune)
	return cmd
}

func when(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Local().Format("2006-01-02 15:04")
}

// printDisk prints the listing (and a prune's removals); exit 1 when a
// node did not answer, a removal failed, or --free was not reached.
func (a *App) printDisk(res contract.DiskResult, id string, pruned bool) error {
	var failures []string
	for _, n := range res.Nodes {
		if n.Error != "" {
			failures = append(failures, n.Node+": "+n.Error)
		}
		if n.Disk == nil || n.Disk.Prune == nil {
			continue
		}
		for _, r := range n.Disk.Prune.Removals {
			if r.Error != "" {
				failures = append(failures, n.Node+": "+r.Error)
			}
		}
		if !n.Disk.Prune.Enough {
			failures = append(failures, n.Node+": not enough to remove for --free (blocks of running lanes are kept)")
		}
		if ip := n.Disk.ImagePrune; ip != nil && ip.Error != "" {
			failures = append(failures, n.Node+": "+ip.Error)
		}
	}
	failed := strings.Join(failures, "; ")
	out := map[string]any{"workflow_id": id, "nodes": res.Nodes, "running": res.Running}
	if failed != "" {
		out["error"] = failed
	}
	if err := a.output(out, func() { a.printDiskText(res, pruned) }); err != nil {
		return err
	}
	if failed != "" {
		return exitCode(1, errors.New(failed))
	}
	return nil
}

// printDiskText is the listing as a table, then what a prune removed (or
// would), what it kept and the free space before and after.
func (a *App) printDiskText(res contract.DiskResult, pruned bool) {
	running := map[string]bool{}
	for _, l := range res.Running {
		running[l] = true
	}
	var rows [][]string
	for _, n := range res.Nodes {
		if n.Disk == nil {
			rows = append(rows, []string{n.Node, "-", "-", "-", "-", "-", "-", "-", "error: " + n.Error})
			continue
		}
		for _, r := range n.Disk.Roots {
			present := 0
			for _, u := range r.Blocks {
				if !u.Present && u.Error == "" {
					continue
				}
				present++
				state := ""
				for _, l := range u.Lanes {
					if running[l] {
						state = "RUNNING"
					}
				}
				if u.Error != "" {
					state = "error: " + u.Error
				}
				rows = append(rows, []string{n.Node, r.Root, contract.HumanBytes(r.Free), strings.Join(u.Lanes, ",") + "/" + u.ID, u.Kind,
					contract.HumanBytes(u.Bytes), when(u.LastServed), when(u.VerifiedAt), strings.TrimSpace(u.Dst + " " + state)})
			}
			if present == 0 && r.Error == "" {
				rows = append(rows, []string{n.Node, r.Root, contract.HumanBytes(r.Free), "-", "-", "-", "-", "-", "no staged blocks"})
			}
		}
	}
	table(a.Out, []string{"NODE", "ROOT", "FREE", "BLOCK", "KIND", "BYTES", "LAST SERVED", "VERIFIED", "PATH"}, rows)
	if pruned {
		for _, n := range res.Nodes {
			if n.Disk == nil || n.Disk.Prune == nil {
				continue
			}
			p := n.Disk.Prune
			for _, r := range p.Removals {
				verb := "would remove"
				if r.Removed {
					verb = "removed"
				} else if r.Error != "" {
					verb = "FAILED to remove"
				}
				fmt.Fprintf(a.Out, "%s: %s %s/%s %s (%s)\n", n.Node, verb, strings.Join(r.Lanes, ","), r.ID, r.Dst, contract.HumanBytes(r.Bytes))
			}
			for _, k := range p.Kept {
				fmt.Fprintf(a.Out, "%s: %s\n", n.Node, k)
			}
			if len(p.Removals) == 0 {
				fmt.Fprintf(a.Out, "%s: nothing to remove\n", n.Node)
			}
			for root, before := range p.FreeBefore {
				fmt.Fprintf(a.Out, "%s: %s free %s -> %s\n", n.Node, root, contract.HumanBytes(before), contract.HumanBytes(p.FreeAfter[root]))
			}
			a.printImagePrune(n.Node, n.Disk.ImagePrune)
		}
	}
}
