package lane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/memfit"
	"github.com/sparklane/sparklane/internal/hubcache"
)

// Fit estimates whether the lane fits in its nodes' memory (memfit):
// the model's weights as its safetensors headers on the NAS declare them
// and the KV cache its engine flags imply, against each node's memory —
// gpu_memory in the config, else discovered (the starter's record of
// what node workers read from /proc/meminfo), else a DGX Spark's 128 GB.
// When it cannot be made — the weights are not where the lane reads them
// (no snapshot on the NAS yet), their headers or config.json do not read
// or hold values no model has (a length field past the limits, a shape or
// num_hidden_layers whose sizes pass int64), or the command's flags are
// not what the engine takes — the estimate is nil and the string says
// why, naming the file, key or flag: the fit refuses only a lane it knows
// cannot fit. A config.json that is absent or does not give the KV
// cache's shape leaves the KV cache uncounted (the estimate says so).
func Fit(cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan, discovered map[string]int64) (*memfit.Estimate, string) {
	est, note, _ := fit(cfg, r, plan, discovered)
	return est, note
}

// fit is Fit, also saying whether a missing estimate is only pending: the
// lane names no model, or its weights are not on the NAS yet (a fetch
// will put them there), as opposed to input that will not read.
func fit(cfg *config.Config, r *contract.Recipe, plan *contract.LanePlan, discovered map[string]int64) (est *memfit.Estimate, note string, pending bool) {
	notEstimated := func(format string, a ...any) (*memfit.Estimate, string, bool) {
		return nil, fmt.Sprintf("memory fit of lane %s not estimated: ", r.Name) + fmt.Sprintf(format, a...), false
	}
	if r.Model == "" {
		est, note, _ = notEstimated("it names no model")
		return est, note, true
	}
	dir, why := modelDir(cfg, r)
	if dir == "" {
		est, note, _ = notEstimated("%s", why)
		return est, note, true
	}
	w, err := memfit.ReadWeights(dir)
	if err != nil {
		return notEstimated("%v", err)
	}
	var m *memfit.Model
	switch mm, err := memfit.ReadModel(dir); {
	case err == nil:
		m = &mm
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, memfit.ErrNoKVShape):
		// the estimate counts the weights alone, saying so
	default:
		return notEstimated("%v", err)
	}
	var argv []string
	if len(plan.Nodes) > 0 {
		argv = plan.Nodes[0].Argv
	}
	e, err := memfit.EngineFlags(plan.Runtime, argv, plan.TP, 1)
	if err != nil {
		return notEstimated("command: %v", err)
	}
	var nodes []memfit.Node
	for _, np := range plan.Nodes {
		n := memfit.Node{Name: np.Node, Memory: memfit.SparkMemory, Source: "DGX Spark default"}
		if c := cfg.Node(np.Node); c != nil && c.GPUMemory > 0 {
			n.Memory, n.Source = c.GPUMemory, "gpu_memory in "+cfg.File
		} else if b := discovered[np.Node]; b > 0 {
			n.Memory, n.Source = b, "MemTotal its worker reported"
		}
		nodes = append(nodes, n)
	}
	est, err = memfit.Compute(r.Name, w, m, e, nodes)
	if err != nil {
		return notEstimated("%v", err)
	}
	return est, "", false
}

// modelDir is the snapshot directory of the lane's model on the NAS: a
// model given as a directory, else the model's repo in the hub root of
// the hub-mirror block that stages it (at the block's revision), else in
// hf_cache_dir at main. "" and why when there is none yet.
func modelDir(cfg *config.Config, r *contract.Recipe) (string, string) {
	if filepath.IsAbs(r.Model) {
		return r.Model, ""
	}
	type root struct{ dir, rev string }
	var roots []root
	for _, b := range r.Staging {
		for _, repo := range b.Repos {
			if b.Kind == "hub-mirror" && repo == r.Model {
				roots = append(roots, root{StagingSrc(cfg, b.Src), b.Revision})
			}
		}
	}
	if cfg.HFCacheDir != "" {
		roots = append(roots, root{cfg.HFCacheDir, ""})
	}
	var tried []string
	for _, rt := range roots {
		repo := hubcache.RepoPath(rt.dir, r.Model)
		rev := rt.rev
		if rev == "" {
			rev = DefaultRevision
		}
		if !hubcache.IsCommit(rev) {
			b, err := os.ReadFile(filepath.Join(repo, hubcache.Refs, rev))
			if err != nil {
				tried = append(tried, filepath.Join(repo, hubcache.Refs, rev))
				continue
			}
			rev = strings.TrimSpace(string(b))
		}
		d := filepath.Join(repo, hubcache.Snapshots, rev)
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d, ""
		}
		tried = append(tried, d)
	}
	if len(tried) == 0 {
		return "", fmt.Sprintf("model %s is in no hub-mirror block and no hf_cache_dir is set", r.Model)
	}
	return "", fmt.Sprintf("model %s is not on the NAS yet (looked at %s)", r.Model, strings.Join(tried, ", "))
}

// FitEstimate is a lane's memory fit as the starter prints it (the engine's
// estimate: weights, KV cache and each node's memory, with the arithmetic).
type FitEstimate = memfit.Estimate

// RecordNodeMemory keeps the memory nodes' workers reported (bytes by
// node) under stateDir, where the fit of recipe check and cutover reads it.
func RecordNodeMemory(stateDir string, mem map[string]int64) error {
	return memfit.SaveDiscovered(stateDir, mem)
}

// KnownNodeMemory is the node memory recorded under stateDir, with fresh
// (just reported) winning and recorded too; record is the recording's
// failure, which costs only the record.
func KnownNodeMemory(stateDir string, fresh map[string]int64) (known map[string]int64, record error) {
	if len(fresh) > 0 {
		record = memfit.SaveDiscovered(stateDir, fresh)
	}
	known = memfit.LoadDiscovered(stateDir)
	for n, b := range fresh {
		if b > 0 {
			known[n] = b
		}
	}
	return known, record
}

// MemoryGB is a memory size as the fit writes it ("121.6 GB").
func MemoryGB(b int64) string { return memfit.GB(b) }
