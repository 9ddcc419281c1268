package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/secretenv"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/imagespec"
	"github.com/sparklane/sparklane/internal/strictdecode"
)

// Runtimes are the serving engines sparklane knows how to render for.
var Runtimes = []string{"sglang", "vllm", "exllamav3", "sim"}

// Staging kinds, verify modes and sparse-rows formats a recipe may name.
var (
	StagingKinds   = []string{"hub-mirror", "sparse-rows"}
	VerifyModes    = []string{"sampled", "sha256"}
	SparseFormats  = []string{"packed", "sparse-copy"}
	placeholderAny = "{"
)

func cfgErr(cfg *Config, key, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %s", cfg.File, key, fmt.Sprintf(format, args...))
}

func recipeErr(r *Recipe, key, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %s", r.File, key, fmt.Sprintf(format, args...))
}

// ConfigErrors lists what is wrong with the fleet config on its own, each
// error naming the file and key: ports, paths, nodes and clusters that do
// not add up. lane.Validate reports them with the recipes' problems.
func ConfigErrors(cfg *Config) []error {
	var errs []error
	for _, e := range keepErrs(cfg.Keep) {
		errs = append(errs, cfgErr(cfg, e[0], "%s", e[1]))
	}
	if cfg.NodeOutageBudget < 0 {
		errs = append(errs, cfgErr(cfg, "node_outage_budget", "%s is negative: write how long a run waits for a node, like \"30m\"", cfg.NodeOutageBudget))
	}
	if cfg.RelayPort < 0 || cfg.RelayPort > 65535 {
		errs = append(errs, cfgErr(cfg, "relay_port", "%d is not a TCP port: use 1-65535 (or 0 for a free port, in-process nodes only)", cfg.RelayPort))
	}
	if cfg.ImagePort < 0 || cfg.ImagePort > 65535 {
		errs = append(errs, cfgErr(cfg, "image_port", "%d is not a TCP port: use 1-65535 (0 or unset: 7291)", cfg.ImagePort))
	}
	errs = append(errs, gatewayErrors(cfg)...)
	if err := CheckMetricsAddress(cfg.MetricsAddress); err != nil {
		errs = append(errs, cfgErr(cfg, "metrics_address", "%v", err))
	}
	if r := cfg.Staging.ServingRate; r != 0 && r < MinServingRate {
		errs = append(errs, cfgErr(cfg, "staging.serving_rate", "%d bytes per second is below 1M: a block of hundreds of GB would stage for days; write it like \"400M\" (bytes per second), or leave it out for no bound", r))
	}
	if cfg.ProbeGrace < 0 {
		errs = append(errs, cfgErr(cfg, "probe_grace", "%s is negative: write how long to wait, like \"5s\"", cfg.ProbeGrace))
	}
	if cfg.DefaultCluster != "" && cfg.Cluster(cfg.DefaultCluster) == nil {
		errs = append(errs, cfgErr(cfg, "default_cluster", "unknown cluster %q — known clusters: %s", cfg.DefaultCluster, strings.Join(cfg.ClusterNames(), ", ")))
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Registries)) {
		dir := cfg.Registries[name]
		if ValidName(name) != nil || dir == "" {
			errs = append(errs, cfgErr(cfg, "registries."+name, "give the path of the registry's local clone, under a plain name"))
		}
	}
	if p := cfg.Temporal.Port; p < 0 || p > 65535 {
		errs = append(errs, cfgErr(cfg, "temporal.port", "%d is not a port in 1..65535 (or 0: a free port)", p))
	} else if p == 0 && cfg.Temporal.Address == "" {
		for _, n := range cfg.Nodes {
			if n.SSH != "" {
				errs = append(errs, cfgErr(cfg, "temporal.port", "0 (a free port, picked at start) cannot serve remote node %s: its tunnel forwards a fixed port — give one (the default is %d)", n.Name, DefaultPort))
				break
			}
		}
	}
	if p := cfg.Temporal.UIPort; p < -1 || p > 65535 {
		errs = append(errs, cfgErr(cfg, "temporal.ui_port", "%d is not a port in 1..65535 (or 0: a free port, -1: no web UI)", p))
	}
	if cfg.HFCacheDir != "" && !filepath.IsAbs(cfg.HFCacheDir) {
		errs = append(errs, cfgErr(cfg, "hf_cache_dir", "%q is not absolute: write the NAS hub root as an absolute path", cfg.HFCacheDir))
	}
	errs = append(errs, fetchErrors(cfg)...)
	errs = append(errs, insecureErrors(cfg)...)
	for i, s := range cfg.SharedRoots {
		if !filepath.IsAbs(s) {
			errs = append(errs, cfgErr(cfg, fmt.Sprintf("shared_roots[%d]", i), "%q is not absolute", s))
		}
	}
	seen := map[string]int{}
	for i, n := range cfg.Nodes {
		key := fmt.Sprintf("nodes[%d]", i)
		if err := uniqueName(cfg, seen, "node", key, n.Name, i, ": rename or remove one"); err != nil {
			errs = append(errs, err)
		}
		if n.SSH != "" {
			if err := checkSSH(n.SSH); err != nil {
				errs = append(errs, cfgErr(cfg, key+".ssh", "%v", err))
			}
		}
		for j, r := range n.Roots {
			if !filepath.IsAbs(r) {
				errs = append(errs, cfgErr(cfg, fmt.Sprintf("%s.roots[%d]", key, j), "%q is not absolute", r))
			}
		}
		if n.FSRoot != "" && !filepath.IsAbs(n.FSRoot) {
			errs = append(errs, cfgErr(cfg, key+".fs_root", "%q is not absolute", n.FSRoot))
		}
		for j, a := range n.ClearHelper {
			if strings.TrimSpace(a) == "" {
				errs = append(errs, cfgErr(cfg, fmt.Sprintf("%s.clear_helper[%d]", key, j), "empty word: write the helper's argv, like [\"sudo\", \"-n\"]"))
			}
		}
	}
	clusters := map[string]int{}
	for i, c := range cfg.Clusters {
		key := fmt.Sprintf("clusters[%d]", i)
		if err := uniqueName(cfg, clusters, "cluster", key, c.Name, i, ""); err != nil {
			errs = append(errs, err)
		}
		if len(c.Nodes) == 0 {
			errs = append(errs, cfgErr(cfg, key+".nodes", "cluster %s has no nodes", c.Name))
		}
		inCluster := map[string]bool{}
		for j, n := range c.Nodes {
			nk := fmt.Sprintf("%s.nodes[%d]", key, j)
			if _, ok := seen[n]; !ok {
				errs = append(errs, cfgErr(cfg, nk, "unknown node %q in cluster %s — known nodes: %s", n, c.Name, strings.Join(nodeNames(cfg), ", ")))
			}
			if inCluster[n] {
				errs = append(errs, cfgErr(cfg, nk, "node %s is listed twice in cluster %s", n, c.Name))
			}
			inCluster[n] = true
		}
	}
	for i, d := range cfg.Devices {
		for j, n := range d.Behind {
			if _, ok := seen[n]; !ok {
				errs = append(errs, cfgErr(cfg, fmt.Sprintf("devices[%d].behind[%d]", i, j), "unknown node %q behind device %s — known nodes: %s", n, d.Name, strings.Join(nodeNames(cfg), ", ")))
			}
		}
	}
	return errs
}

// sshWithPort is user@host (or user@[v6]) with ssh's port 22 written out
// (what `starter init` wrote before it wrote the port); false when s has a
// port or is not user@host (checkSSH says why).
func sshWithPort(s string) (string, bool) {
	user, host, ok := strings.Cut(s, "@")
	bracketed := strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") && len(host) > 2
	if !ok || user == "" || host == "" || strings.ContainsAny(s, " \t") || (!bracketed && strings.ContainsAny(host, ":[]")) {
		return "", false
	}
	return s + ":22", true
}

// checkSSH accepts user@host:port (host may be [v6]).
func checkSSH(s string) error {
	user, hostport, ok := strings.Cut(s, "@")
	if !ok || user == "" {
		return fmt.Errorf("%q is not user@host:port: write it like root@dgx1:22 (leave ssh empty for this machine)", s)
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return fmt.Errorf("%q is not user@host:port: write it like %s@%s:22", s, user, strings.TrimSuffix(hostport, ":"))
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("%q: port %q is not a number in 1..65535", s, port)
	}
	return nil
}

func nodeNames(cfg *Config) []string {
	var out []string
	for _, n := range cfg.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// ClusterNames are the configured clusters' names in file order, for
// "known clusters" in errors.
func (c *Config) ClusterNames() []string {
	var out []string
	for _, cl := range c.Clusters {
		out = append(out, cl.Name)
	}
	return out
}

// laneNameRE is what a lane name or alias may look like: it becomes part
// of directory names (recipes/LANE/reports) and container names.
var laneNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// MaxNameLen bounds a lane name (container names and paths carry it).
const MaxNameLen = 100

// ValidName says why name cannot be a lane name or alias, or nil. Names
// are names, not paths: lower-case letters, digits, '.', '_' and '-',
// starting with a letter or digit, no "..".
func ValidName(name string) error {
	switch {
	case name == "":
		return errors.New("empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("%d characters, over %d", len(name), MaxNameLen)
	case !laneNameRE.MatchString(name) || strings.Contains(name, ".."):
		return fmt.Errorf("%q is not a lane name: use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit, without \"..\" (it names directories and containers)", name)
	}
	return nil
}

// NameErrors catches names that are not names and two recipes answering
// to one lane name or alias: what no recipe can fix alone.
func NameErrors(recipes []*Recipe) []error {
	var errs []error
	for _, r := range recipes {
		if err := ValidName(r.Name); err != nil {
			from := ""
			if r.Name == baseName(r.File) {
				from = " (taken from the file name: rename the file or set name)"
			}
			errs = append(errs, recipeErr(r, "name", "%v%s", err, from))
		}
		for i, a := range r.Aliases {
			if err := ValidName(a); err != nil {
				errs = append(errs, recipeErr(r, fmt.Sprintf("aliases[%d]", i), "%v", err))
			}
		}
	}
	owner := map[string]*Recipe{}
	for _, r := range recipes {
		if o, ok := owner[r.Name]; ok {
			errs = append(errs, recipeErr(r, "name", "lane %s is also defined by %s: rename one", r.Name, o.File))
			continue
		}
		owner[r.Name] = r
	}
	aliasOwner := map[string]*Recipe{}
	for _, r := range recipes {
		for i, a := range r.Aliases {
			key := fmt.Sprintf("aliases[%d]", i)
			if o, ok := owner[a]; ok && o != r {
				errs = append(errs, recipeErr(r, key, "alias %q is the name of lane %s (%s): pick another alias", a, o.Name, o.File))
				continue
			}
			if o, ok := aliasOwner[a]; ok && o != r {
				errs = append(errs, recipeErr(r, key, "alias %q is also claimed by lane %s (%s): each alias names one lane", a, o.Name, o.File))
				continue
			}
			aliasOwner[a] = r
		}
	}
	return errs
}

// intDefault reads an integer [defaults] value; ok=false when absent.
func intDefault(r *Recipe, key string) (int, bool, error) {
	v, ok := r.Defaults[key]
	if !ok {
		return 0, false, nil
	}
	if s, isStr := v.(string); isStr {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return 0, true, recipeErr(r, "defaults."+key, "%q is not an integer", s)
		}
		return n, true, nil
	}
	n, isInt := strictdecode.AsInt(v)
	if !isInt {
		return 0, true, recipeErr(r, "defaults."+key, "expected an integer, got %s", strictdecode.Describe(v))
	}
	return int(n), true, nil
}

// DefaultInt is [defaults] key as an integer, ok=false when the key is
// absent or not an integer (RecipeErrors reports that): how the fleet
// checks read tensor_parallel.
func (r *Recipe) DefaultInt(key string) (int, bool) {
	n, ok, err := intDefault(r, key)
	return n, ok && err == nil
}

// RecipeErrors lists what is wrong with a recipe on its own, without a
// fleet: missing or unknown values, bad placeholders, staging blocks and
// clear paths that contradict each other. Each error names the file and
// key. lane.Validate adds what needs the fleet (its cluster, the nodes'
// roots, a render).
func RecipeErrors(r *Recipe) []error {
	var errs []error
	imageKey := "image"
	if r.Format == "sparkrun" {
		imageKey = "container"
	}
	if r.Runtime == "" {
		errs = append(errs, recipeErr(r, "runtime", "missing: use one of %s", strings.Join(Runtimes, ", ")))
	} else if !slices.Contains(Runtimes, r.Runtime) {
		errs = append(errs, recipeErr(r, "runtime", "unknown runtime %q: use one of %s", r.Runtime, strings.Join(Runtimes, ", ")))
	}
	if strings.TrimSpace(r.Image) == "" {
		errs = append(errs, recipeErr(r, imageKey, "missing: pin the container image the lane runs"))
	}
	if strings.TrimSpace(r.Command) == "" {
		errs = append(errs, recipeErr(r, "command", "missing: give the serve command template"))
	}
	for _, k := range slices.Sorted(maps.Keys(r.EnvFrom)) {
		switch _, err := secretenv.Parse(r.EnvFrom[k]); {
		case !secretenv.ValidName(k):
			errs = append(errs, recipeErr(r, "env_from."+k, "%q is not an environment variable name", k))
		case err != nil:
			errs = append(errs, recipeErr(r, "env_from."+k, "%v", err))
		}
		if _, both := r.Env[k]; both {
			errs = append(errs, recipeErr(r, "env_from."+k, "%s is also set in [env]: keep only the env_from entry (the secret's source)", k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.Defaults)) {
		if slices.Contains(FixedKeys, k) {
			errs = append(errs, recipeErr(r, "defaults."+k, "%s is set per node by sparklane (built-ins: %s): rename this default", k, strings.Join(FixedKeys, ", ")))
		}
	}
	for _, k := range []string{"tensor_parallel", "port", "dist_port", "master_port", "expert_parallel"} {
		n, ok, err := intDefault(r, k)
		if err != nil {
			errs = append(errs, err)
		} else if ok && (k == "port" || k == "dist_port" || k == "master_port") && (n < 1 || n > 65535) {
			errs = append(errs, recipeErr(r, "defaults."+k, "%d is not a port in 1..65535", n))
		}
	}
	if r.Bench.Runs < 0 || r.Bench.Runs > MaxBenchRuns {
		errs = append(errs, recipeErr(r, "bench.runs", "%d is out of range: write how many times the sweep repeats, 1..%d (0 or absent: 3)", r.Bench.Runs, MaxBenchRuns))
	}
	if r.Probe.Ready < 0 {
		errs = append(errs, recipeErr(r, "probe.ready", "%s is negative: write the readiness budget, like \"30m\"", contract.Duration(r.Probe.Ready)))
	}
	if r.Bench.Mode != "" && !slices.Contains(contract.BenchModes, r.Bench.Mode) {
		errs = append(errs, recipeErr(r, "bench.mode", "unknown mode %q: use one of %s", r.Bench.Mode, strings.Join(contract.BenchModes, ", ")))
	}
	if r.Probe.ModelType != "" && !slices.Contains(contract.ModelTypes, r.Probe.ModelType) {
		errs = append(errs, recipeErr(r, "probe.model_type", "unknown model type %q: use one of %s", r.Probe.ModelType, strings.Join(contract.ModelTypes, ", ")))
	}
	for i, s := range r.Probe.LogSignatures {
		if strings.TrimSpace(s) == "" {
			errs = append(errs, recipeErr(r, fmt.Sprintf("probe.log_signatures[%d]", i), "empty: write the log line (or part of it) that must appear"))
		}
	}
	if e := r.Probe.APIKeyEnv; e != "" && !envNameRE.MatchString(e) {
		errs = append(errs, recipeErr(r, "probe.api_key_env", "%q is not an environment variable name: name the variable that holds the key, never the key itself", e))
	}
	if r.Mode != "" && !slices.Contains([]string{"solo", "cluster", "auto"}, r.Mode) {
		errs = append(errs, recipeErr(r, "mode", "%q: use solo, cluster or auto", r.Mode))
	}
	for _, e := range keepErrs(r.Keep) {
		errs = append(errs, recipeErr(r, e[0], "%s", e[1]))
	}
	if r.NodeOutageBudget < 0 {
		errs = append(errs, recipeErr(r, "node_outage_budget", "%s is negative: write how long a run waits for a node, like \"30m\"", contract.Duration(r.NodeOutageBudget)))
	}
	if r.Hooks.Timeout < 0 {
		errs = append(errs, recipeErr(r, "hooks.timeout", "%s is negative: write how long a hook may run, like \"2m\"", contract.Duration(r.Hooks.Timeout)))
	}
	errs = append(errs, checkPlaceholders(r)...)
	if r.MinNodes < 0 || r.MaxNodes < 0 || (r.MaxNodes > 0 && r.MinNodes > r.MaxNodes) {
		errs = append(errs, recipeErr(r, "min_nodes", "min_nodes %d / max_nodes %d is not a valid range", r.MinNodes, r.MaxNodes))
	}
	for i, m := range r.Mounts {
		key := fmt.Sprintf("mounts[%d]", i)
		if m.Src == "" {
			errs = append(errs, recipeErr(r, key+".src", "missing: the node path to bind"))
		} else if !strings.Contains(m.Src, placeholderAny) && !filepath.IsAbs(m.Src) {
			errs = append(errs, recipeErr(r, key+".src", "%q is not absolute", m.Src))
		}
		if m.Dst == "" {
			errs = append(errs, recipeErr(r, key+".dst", "missing: the container path"))
		} else if !strings.Contains(m.Dst, placeholderAny) && !filepath.IsAbs(m.Dst) {
			errs = append(errs, recipeErr(r, key+".dst", "%q is not absolute", m.Dst))
		}
	}
	errs = append(errs, checkClearPaths(r)...)
	errs = append(errs, stagingErrors(r)...)
	return errs
}

// stagingErrors checks each [[staging]] block on its own: ids, paths, and
// the keys of its kind.
func stagingErrors(r *Recipe) []error {
	var errs []error
	ids := map[string]int{}
	for i, s := range r.Staging {
		key := fmt.Sprintf("staging[%d]", i)
		if s.ID != "" {
			if j, dup := ids[s.ID]; dup {
				errs = append(errs, recipeErr(r, key+".id", "id %q is also used by staging[%d]", s.ID, j))
			}
			ids[s.ID] = i
		}
		if s.Src == "" {
			errs = append(errs, recipeErr(r, key+".src", "missing: where to stage from (the NAS path)"))
		}
		if s.Dst == "" {
			errs = append(errs, recipeErr(r, key+".dst", "missing: where to stage to on each node"))
		} else if !filepath.IsAbs(s.Dst) {
			errs = append(errs, recipeErr(r, key+".dst", "%q is not absolute", s.Dst))
		}
		if s.Mount != "" && !filepath.IsAbs(s.Mount) {
			errs = append(errs, recipeErr(r, key+".mount", "%q is not an absolute container path", s.Mount))
		}
		if s.MinFree < 0 {
			errs = append(errs, recipeErr(r, key+".min_free", "must not be negative"))
		}
		switch s.Kind {
		case "hub-mirror":
			if len(s.Repos) == 0 {
				errs = append(errs, recipeErr(r, key+".repos", "missing: list the repos to mirror (org/name)"))
			}
			if s.Verify != "" && !slices.Contains(VerifyModes, s.Verify) {
				errs = append(errs, recipeErr(r, key+".verify", "unknown verify mode %q: use sampled or sha256", s.Verify))
			}
			for j, e := range s.Exports {
				ek := fmt.Sprintf("%s.exports[%d]", key, j)
				if !slices.Contains(s.Repos, e.Repo) {
					errs = append(errs, recipeErr(r, ek+".repo", "%q is not one of this block's repos %v", e.Repo, s.Repos))
				}
				if e.Mount != "" && !filepath.IsAbs(e.Mount) {
					errs = append(errs, recipeErr(r, ek+".mount", "%q is not an absolute container path", e.Mount))
				}
			}
			if len(s.Tensors) > 0 || len(s.Layers) > 0 || s.Format != "" || s.RecordBytes != 0 {
				errs = append(errs, recipeErr(r, key, "tensors/layers/format/record_bytes belong to sparse-rows blocks, not hub-mirror"))
			}
			if err := CheckRevision(s.Revision); s.Revision != "" && err != nil {
				errs = append(errs, recipeErr(r, key+".revision", "%q %v: write a commit sha (40 hex), a branch or a tag", s.Revision, err))
			}
			if (s.Fetch || s.Revision != "") && !filepath.IsAbs(s.Src) && !strings.HasPrefix(s.Src, "{hf_cache_dir}") { // lane.StagingSrc
				errs = append(errs, recipeErr(r, key+".src", "%q is not absolute: a block that is fetched needs the NAS hub root it downloads into, as an absolute path", s.Src))
			}
		case "sparse-rows":
			if len(s.Tensors) == 0 {
				errs = append(errs, recipeErr(r, key+".tensors", "missing: name the embedding tensors to split"))
			}
			if len(s.Layers) == 0 {
				errs = append(errs, recipeErr(r, key+".layers", "missing: list the layers to stage"))
			}
			if !slices.Contains(SparseFormats, s.Format) {
				errs = append(errs, recipeErr(r, key+".format", "%q: use packed or sparse-copy", s.Format))
			}
			if s.Verify != "" && !slices.Contains(VerifyModes, s.Verify) {
				errs = append(errs, recipeErr(r, key+".verify", "unknown verify mode %q: use sampled or sha256", s.Verify))
			}
			if s.Rows < 0 {
				errs = append(errs, recipeErr(r, key+".rows", "must not be negative"))
			}
			if s.RowsEnv != "" && s.Rows == 0 && s.Format == "packed" {
				errs = append(errs, recipeErr(r, key+".rows", "missing: rows_env %s on a packed block needs the table's total rows (packed files hold only each rank's rows, so the serve step cannot read the total from them)", s.RowsEnv))
			}
			if s.RecordBytes < 0 {
				errs = append(errs, recipeErr(r, key+".record_bytes", "must not be negative"))
			}
			if s.Revision != "" || s.Fetch {
				errs = append(errs, recipeErr(r, key, "revision/fetch belong to hub-mirror blocks: sparse-rows tables are not downloaded from the Hub"))
			}
		case "":
			errs = append(errs, recipeErr(r, key+".kind", "missing: use hub-mirror or sparse-rows"))
		default:
			errs = append(errs, recipeErr(r, key+".kind", "unknown staging kind %q: use hub-mirror or sparse-rows", s.Kind))
		}
	}
	return errs
}

// checkClearPaths checks [hooks] clear on its own: absolute, no "..", and
// never a staging dst or export of the recipe, an ancestor of one, or
// inside one (clearing would delete staged data and its ledger).
func checkClearPaths(r *Recipe) []error {
	var errs []error
	type staged struct{ key, path string }
	var dsts []staged
	for i, s := range r.Staging {
		if s.Dst == "" || !filepath.IsAbs(s.Dst) {
			continue
		}
		key := fmt.Sprintf("staging[%d]", i)
		dsts = append(dsts, staged{key + ".dst", filepath.Clean(s.Dst)})
		for j, e := range s.Exports {
			dsts = append(dsts, staged{fmt.Sprintf("%s.exports[%d]", key, j), exportPath(s, e)})
		}
	}
	for i, c := range r.Hooks.Clear {
		key := fmt.Sprintf("hooks.clear[%d]", i)
		switch {
		case !filepath.IsAbs(c):
			errs = append(errs, recipeErr(r, key, "%q is not absolute", c))
			continue
		case hasDotDot(c):
			errs = append(errs, recipeErr(r, key, "%s contains \"..\": write the directory to clear without it", c))
			continue
		}
		cc := filepath.Clean(c)
		for _, d := range dsts {
			switch {
			case cc == d.path:
				errs = append(errs, recipeErr(r, key, "%s is %s: clear would delete the staged data; clear a directory of its own", c, d.key))
			case isUnder(d.path, cc):
				errs = append(errs, recipeErr(r, key, "%s holds %s (%s): clear would delete the staged data; clear a directory of its own", c, d.key, d.path))
			case isUnder(cc, d.path):
				errs = append(errs, recipeErr(r, key, "%s is inside %s (%s): clear would delete staged data; clear a directory of its own", c, d.key, d.path))
			}
		}
	}
	return errs
}

// exportPath is where export e of block s lands on a node, by the
// contract's rule (contract.Staging.ExportPath): the path the node worker
// writes is the one checked.
func exportPath(s Staging, e Export) string {
	return contract.Staging{Dst: s.Dst}.ExportPath(contract.Export(e))
}

// isUnder says whether p lies strictly below dir (both clean).
func isUnder(p, dir string) bool {
	if dir == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}

// checkPlaceholders finds the {key}s render would not resolve, following
// [defaults] values the way render does (a default may name another key),
// and reports them with render's words at the key render would name. So
// recipe check on one file, without a fleet, fails where lanes would.
func checkPlaceholders(r *Recipe) []error {
	known := map[string]bool{}
	for _, k := range append(append([]string(nil), FixedKeys...), BuiltinKeys...) {
		known[k] = true
	}
	for k := range r.Defaults {
		known[k] = true
	}
	var errs []error
	check := func(key, s string) {
		reported := map[string]bool{}
		visited := map[string]bool{}
		var walk func(s string)
		walk = func(s string) {
			for _, m := range Placeholder.FindAllStringSubmatch(s, -1) {
				p := m[1]
				if !known[p] {
					if !reported[p] {
						reported[p] = true
						errs = append(errs, recipeErr(r, key, "unknown placeholder {%s}: add %s under [defaults] or pass -o %s=VALUE", p, p, p))
					}
					continue
				}
				if v, ok := r.Defaults[p]; ok && !visited[p] {
					visited[p] = true
					walk(ValueString(v))
				}
			}
		}
		walk(s)
	}
	check("image", r.Image)
	for _, k := range []string{"tensor_parallel", "dist_port", "master_port", "port", "expert_parallel"} {
		if v, ok := r.Defaults[k]; ok {
			check("defaults."+k, ValueString(v))
		}
	}
	check("command", r.Command)
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		check("env."+k, r.Env[k])
	}
	for i, m := range r.Mounts {
		check(fmt.Sprintf("mounts[%d].src", i), m.Src)
		check(fmt.Sprintf("mounts[%d].dst", i), m.Dst)
	}
	return errs
}

func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(filepath.ToSlash(p), "/"), "..")
}

// Node returns the node named name, or nil.
func (c *Config) Node(name string) *Node {
	for i := range c.Nodes {
		if c.Nodes[i].Name == name {
			return &c.Nodes[i]
		}
	}
	return nil
}

// Cluster returns the cluster named name, or nil.
func (c *Config) Cluster(name string) *Cluster {
	for i := range c.Clusters {
		if c.Clusters[i].Name == name {
			return &c.Clusters[i]
		}
	}
	return nil
}

// Resolve finds a lane by name or alias (--lane mia). An unknown lane gets
// a "did you mean" and the list of known lanes.
func Resolve(recipes []*Recipe, laneOrAlias string) (*Recipe, error) {
	for _, r := range recipes {
		if r.Name == laneOrAlias {
			return r, nil
		}
	}
	for _, r := range recipes {
		if slices.Contains(r.Aliases, laneOrAlias) {
			return r, nil
		}
	}
	var candidates, known []string
	for _, r := range recipes {
		candidates = append(candidates, r.Name)
		candidates = append(candidates, r.Aliases...)
		k := r.Name
		if len(r.Aliases) > 0 {
			k += " (" + strings.Join(r.Aliases, ", ") + ")"
		}
		known = append(known, k)
	}
	sort.Strings(known)
	hint := ""
	if near := strictdecode.Nearest(laneOrAlias, candidates); near != "" {
		hint = fmt.Sprintf(" — did you mean %s?", near)
	} else {
		hint = " —"
	}
	if len(known) == 0 {
		return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("unknown lane %q: no recipes loaded: check recipes_dir", laneOrAlias))
	}
	return nil, fault.Permanent(fault.InvalidSpec, fmt.Errorf("unknown lane %q%s known lanes: %s", laneOrAlias, hint, strings.Join(known, "; ")))
}

// envNameRE is a portable environment variable name.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckMetricsAddress accepts "off", "" (the default) or a loopback
// host:port: /metrics has no authentication, and nothing sparklane runs
// listens unauthenticated beyond loopback.
func CheckMetricsAddress(addr string) error {
	if addr == "" || addr == "off" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (like \"127.0.0.1:9464\"), or \"off\"", addr)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return fmt.Errorf("%q: port %q is not a number", addr, port)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("%q is not a loopback address: /metrics has no authentication, so it listens on 127.0.0.1 (or ::1) only; scrape a remote node through an SSH forward or a Prometheus on the node", addr)
	}
	return nil
}

// uniqueName checks the name of the i-th [[kind]] table (at key): there,
// and not an earlier one's (seen maps the names so far to their index).
// fix is appended to the error of a name given twice.
func uniqueName(cfg *Config, seen map[string]int, kind, key, name string, i int, fix string) error {
	if name == "" {
		return cfgErr(cfg, key+".name", "missing: every %s needs a name", kind)
	}
	if j, dup := seen[name]; dup {
		return cfgErr(cfg, key+".name", "%s %s is defined twice (also %ss[%d])%s", kind, name, kind, j, fix)
	}
	seen[name] = i
	return nil
}

// keepErrs checks a [keep] table: each finding is {key, message}.
func keepErrs(k Keep) [][2]string {
	var out [][2]string
	// interval and window have floors the loader enforces (Keep's min tags).
	if k.Restarts < 0 {
		out = append(out, [2]string{"keep.restarts", fmt.Sprintf("%d is negative: write how many restarts keep.window allows, like 3", k.Restarts)})
	}
	return out
}

// FetchControl is the fetch_node value naming the control service's
// worker (the default when fetch_node is empty).
const FetchControl = "control"

// fetchErrors checks the Hub fetch keys: hf_endpoint an http(s) URL,
// hf_token_file an absolute path, fetch_node a node or "control".
func fetchErrors(cfg *Config) []error {
	var errs []error
	if e := cfg.HFEndpoint; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, cfgErr(cfg, "hf_endpoint", "%q is not an http(s) URL: write the Hub's base URL, like \"https://huggingface.co\"", e))
		}
	}
	if cfg.HFTokenFile != "" && !filepath.IsAbs(cfg.HFTokenFile) {
		errs = append(errs, cfgErr(cfg, "hf_token_file", "%q is not absolute: write the token file's path on the fetching worker's host", cfg.HFTokenFile))
	}
	if n := cfg.FetchNode; n != "" && n != FetchControl && cfg.Node(n) == nil {
		errs = append(errs, cfgErr(cfg, "fetch_node", "unknown node %q: name a node that mounts the NAS read-write, or %q for the control service — known nodes: %s", n, FetchControl, strings.Join(nodeNames(cfg), ", ")))
	}
	return errs
}

// insecureErrors checks image_insecure_registries: each a registry host
// as an image names it (host[:port]), no scheme, path or credentials.
func insecureErrors(cfg *Config) []error {
	var errs []error
	for i, h := range cfg.ImageInsecureRegistries {
		if err := imagespec.CheckRegistryHost(h); err != nil {
			errs = append(errs, cfgErr(cfg, fmt.Sprintf("image_insecure_registries[%d]", i), "%v", err))
		}
	}
	return errs
}

// CheckRevision accepts a Hub revision: a commit sha, a branch or a tag
// (refs/pr/1 too), whose slash-separated parts are real names.
func CheckRevision(rev string) error {
	if rev == "" || strings.ContainsAny(rev, "\\\x00 ") {
		return errors.New("is empty or has a backslash, NUL or blank")
	}
	for _, c := range strings.Split(rev, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("has the part %q, which would leave the refs directory", c)
		}
	}
	return nil
}
