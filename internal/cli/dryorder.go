package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
)

// dryStageOrder is what a cutover's dry run says of node n's stage order:
// "stage ahead (room: X free, Y needed)" when the lane's blocks fit on each
// of the node's roots beside the lanes running there, "stage after stop
// (why)" when one does not (which needs --make-room to prune the stopped
// lane's blocks: a cutover without room after the stop either refuses), "stage ahead: nothing serving" when no other
// lane runs there. The need is what the engines' dry run would copy plus
// min_free's headroom, per root (the control service's StageRoom decides
// the run itself, with --make-room's pruning counted too); "" when the
// node's plan or state is unknown.
func dryStageOrder(n DryRunNode, r *contract.Recipe, st contract.NodeState, lane string) string {
	var others []string
	for _, l := range st.Lanes {
		if l != lane {
			others = append(others, l)
		}
	}
	if len(others) == 0 {
		if st.State == "" {
			return ""
		}
		return "stage ahead: nothing serving"
	}
	need := map[string]int64{}
	for _, b := range n.Staging {
		if b.Plan == nil {
			return ""
		}
		root := rootOf(blockDst(r, b.Block), st.Roots)
		need[root] += b.Plan.CopiedBytes + max(0, blockMinFree(r, b.Block)-b.Plan.TotalBytes)
	}
	var free, needed int64
	var short []string
	for _, rf := range st.Roots {
		y, ok := need[rf.Root]
		if !ok {
			continue
		}
		free, needed = free+rf.Free, needed+y
		if y > rf.Free {
			short = append(short, fmt.Sprintf("%s needs %s more than it has", rf.Root, contract.HumanBytes(y-rf.Free)))
		}
	}
	if len(short) > 0 {
		return fmt.Sprintf("stage after stop (%s: %s beside lane %s; stopping it frees no disk by itself: with --make-room its blocks are pruned then, else the cutover refuses before stopping anything)",
			n.Node, strings.Join(short, "; "), strings.Join(others, ", "))
	}
	return fmt.Sprintf("stage ahead (room: %s free, %s needed, beside lane %s)", contract.HumanBytes(free), contract.HumanBytes(needed), strings.Join(others, ", "))
}

// rootOf is the root of roots that holds path ("" when none does).
func rootOf(path string, roots []contract.RootFree) string {
	best := ""
	for _, rf := range roots {
		if rel, err := filepath.Rel(rf.Root, path); err == nil && !strings.HasPrefix(rel, "..") && len(rf.Root) > len(best) {
			best = rf.Root
		}
	}
	return best
}

func blockDst(r *contract.Recipe, id string) string {
	for _, b := range r.Staging {
		if b.ID == id {
			return b.Dst
		}
	}
	return ""
}

func blockMinFree(r *contract.Recipe, id string) int64 {
	for _, b := range r.Staging {
		if b.ID == id {
			return b.MinFree
		}
	}
	return 0
}

// stageAheadSteps reorders a cutover's dry-run steps as a stage ahead runs
// them: the image, stage and verify steps before the previous lanes'
// stops, which come right before the serve.
func stageAheadSteps(steps []string) []string {
	var head, stops, stage, rest []string
	for _, s := range steps {
		switch {
		case strings.HasPrefix(s, "stop lane ") || strings.HasPrefix(s, "stop the lanes running on"):
			stops = append(stops, s)
		case strings.HasPrefix(s, "image ") || strings.HasPrefix(s, "stage ") || strings.HasPrefix(s, "verify staged"):
			stage = append(stage, s)
		case len(stage) == 0 && len(rest) == 0:
			head = append(head, s)
		default:
			rest = append(rest, s)
		}
	}
	if len(stops) > 0 {
		stops = append([]string{"end the previous lanes' keepers (they watched on, healing held, while the lane staged)"}, stops...)
	}
	out := append(head, stage...)
	out = append(out, stops...)
	return append(out, rest...)
}

// cutoverRunning is one cutover under way, as status shows it.
type cutoverRunning struct {
	Cluster string `json:"cluster"`
	Lane    string `json:"lane"`
	// Running are its steps running now ("stage weights [n1]", "image …").
	Running []string `json:"running"`
}

// cutoversRunning asks each cluster's running cutover (cutover/CLUSTER)
// for its progress: the lane it brings and its running steps. While it
// stages ahead, status shows the serving lane (nodes, keeper) and this.
func cutoversRunning(ctx context.Context, env *control.Conn, cfg *config.Config) []cutoverRunning {
	var out []cutoverRunning
	for _, c := range cfg.Clusters {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		d, err := env.Client.DescribeWorkflowExecution(qctx, contract.CutoverID(c.Name), "")
		if err != nil || d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			cancel()
			continue
		}
		v, err := env.Client.QueryWorkflow(qctx, contract.CutoverID(c.Name), "", contract.ProgressQuery)
		cancel()
		var p contract.Progress
		if err != nil || v.Get(&p) != nil {
			continue
		}
		cr := cutoverRunning{Cluster: c.Name, Lane: p.Lane, Running: []string{}}
		for _, s := range p.Steps {
			if s.Status == contract.StepRunning || s.Status == contract.StepWaiting {
				name := s.Name
				if s.Node != "" {
					name += " [" + s.Node + "]"
				}
				cr.Running = append(cr.Running, name)
			}
		}
		out = append(out, cr)
	}
	return out
}

// printCutoversRunning is status's CUTOVER table.
func printCutoversRunning(a *App, cs []cutoverRunning) {
	if len(cs) == 0 {
		return
	}
	var rows [][]string
	for _, c := range cs {
		rows = append(rows, []string{c.Cluster, c.Lane, dash(strings.Join(c.Running, ", "))})
	}
	fmt.Fprintln(a.Out)
	table(a.Out, []string{"CLUSTER", "CUTOVER TO", "RUNNING NOW"}, rows)
}
