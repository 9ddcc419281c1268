package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/kballard/go-shellquote"

	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/secretenv"
)

// Rendering defaults for the built-in placeholders.
const (
	DefaultDistPort = 29500
	// SparkrunDistPort is the rendezvous port sparkrun gives the engines
	// (its init_port), used for sparkrun recipes so they rendezvous where
	// their authors expect.
	SparkrunDistPort = 25000
	// DefaultDPRPCPort is vLLM's data-parallel RPC port as sparkrun sets it.
	DefaultDPRPCPort = 13345
	// SparkrunHFHome is where sparkrun mounts the HF cache root in the
	// container (HF_HOME); the hub cache is its hub/ directory.
	SparkrunHFHome = "/cache/huggingface"
	DefaultAPIPort = 8000
	// DefaultHubCacheMount is where a staged hub mirror is bound when the
	// recipe does not bind hf_cache_dir anywhere itself.
	DefaultHubCacheMount = "/root/.cache/huggingface/hub"
)

// fixedKeys are per-node facts; neither [defaults] nor -o may change them.
var fixedKeys = []string{"lane", "node", "node_rank", "nnodes", "head_addr", "node_addr", "hf_cache_dir"}

// builtinKeys have a value from render unless [defaults] or -o set one.
var builtinKeys = []string{"model", "image", "port", "dist_port", "master_port", "tensor_parallel", "expert_parallel", "model_path"}

var placeholderRE = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// LocalPath maps a recipe path to the path the node's worker touches:
// prefixed by the node's fs_root (so simulated nodes on one machine do not
// share a disk) unless it lies under a shared root (the NAS, seen alike by
// every node).
func (n Node) LocalPath(p string, sharedRoots []string) string {
	if n.FSRoot == "" || n.FSRoot == "/" || !filepath.IsAbs(p) {
		return p
	}
	c := filepath.Clean(p)
	for _, r := range sharedRoots {
		r = filepath.Clean(r)
		if c == r || strings.HasPrefix(c, r+string(filepath.Separator)) {
			return p
		}
	}
	return filepath.Join(n.FSRoot, c)
}

// ExportPath is where an export tree of this hub-mirror block lives on the
// node: e.Path if absolute, relative to Dst if not, and
// DST/exports/ORG--NAME when empty.
func (s Staging) ExportPath(e Export) string {
	switch {
	case e.Path == "":
		return filepath.Join(s.Dst, "exports", strings.ReplaceAll(e.Repo, "/", "--"))
	case filepath.IsAbs(e.Path):
		return filepath.Clean(e.Path)
	default:
		return filepath.Join(s.Dst, e.Path)
	}
}

// HubDir is the node directory holding the mirrored hub cache of a
// hub-mirror block (DST/hub, laid out like hf_cache_dir).
func (s Staging) HubDir() string { return filepath.Join(s.Dst, "hub") }

// vars resolves {key} placeholders iteratively: a value may reference
// other keys; cycles and unknown keys are errors naming the recipe file.
type vars struct {
	file  string
	raw   map[string]string
	where map[string]string // key -> where it was set, for error messages
	done  map[string]string
	busy  map[string]bool
	used  map[string]bool
}

func (v *vars) get(key string, chain []string) (string, error) {
	if s, ok := v.done[key]; ok {
		v.used[key] = true
		return s, nil
	}
	raw, ok := v.raw[key]
	if !ok {
		return "", fmt.Errorf("unknown placeholder {%s}: add %s under [defaults] or pass -o %s=VALUE", key, key, key)
	}
	if v.busy[key] {
		return "", fmt.Errorf("placeholder cycle %s → %s: break the loop in [defaults]", strings.Join(chain, " → "), key)
	}
	v.busy[key] = true
	s, err := v.expand(raw, append(chain, key))
	v.busy[key] = false
	if err != nil {
		return "", err
	}
	v.done[key] = s
	v.used[key] = true
	return s, nil
}

func (v *vars) expand(s string, chain []string) (string, error) {
	var firstErr error
	out := placeholderRE.ReplaceAllStringFunc(s, func(m string) string {
		if firstErr != nil {
			return m
		}
		val, err := v.get(m[1:len(m)-1], chain)
		if err != nil {
			firstErr = err
			return m
		}
		return val
	})
	return out, firstErr
}

// render expands s found at key in the recipe, naming file and key on error.
func (v *vars) render(key, s string) (string, error) {
	out, err := v.expand(s, nil)
	if err != nil {
		return "", fmt.Errorf("%s: %s: %w", v.file, key, err)
	}
	return out, nil
}

func (v *vars) intValue(key string) (int, error) {
	s, err := v.get(key, nil)
	if err != nil {
		return 0, fmt.Errorf("%s: %s: %w", v.file, v.where[key], err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%s: %s: %q is not an integer", v.file, v.where[key], s)
	}
	return n, nil
}

func valueString(v any) string {
	if s, ok := scalarString(v); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// headAddr is where rank 0 listens for the other ranks: its data-plane
// address, else its SSH host, else loopback (a local node).
func headAddr(n *Node) string {
	if n.Address != "" {
		return n.Address
	}
	if n.SSH != "" {
		_, hp, _ := strings.Cut(n.SSH, "@")
		if h, _, err := net.SplitHostPort(hp); err == nil {
			return h
		}
	}
	return "127.0.0.1"
}

// Render turns a recipe into what each node of its cluster runs, in cluster
// order (rank = index, head = rank 0): container name, image, command with
// placeholders filled and the engine's multi-node flags, env with the world
// shape, and mounts with staged data bound in. overrides are -o key=value
// and win over [defaults]. Render reads no files; mount sources are recipe
// paths that node workers map with Node.LocalPath.
func Render(cfg *Config, r *Recipe, overrides map[string]string) (*LanePlan, error) {
	return RenderOn(cfg, r, "", overrides)
}

// RenderOn is Render on a cluster chosen by the operator: cluster (from
// --cluster) wins over the recipe's own, and a recipe without one (every
// sparkrun recipe) falls back to the config's default_cluster. The recipe
// is not changed.
func RenderOn(cfg *Config, r *Recipe, cluster string, overrides map[string]string) (*LanePlan, error) {
	if cfg == nil || r == nil {
		return nil, errors.New("render: config and recipe are required")
	}
	if cluster == "" {
		cluster = r.Cluster
	}
	if cluster == "" {
		cluster = cfg.DefaultCluster
	}
	if cluster != r.Cluster {
		cp := *r
		cp.Cluster = cluster
		r = &cp
	}
	return render(cfg, r, overrides)
}

func render(cfg *Config, r *Recipe, overrides map[string]string) (*LanePlan, error) {
	bad := func(err error) (*LanePlan, error) { return nil, fault.Permanent(fault.InvalidSpec, err) }
	if err := ValidName(r.Name); err != nil {
		// The name becomes container names and paths: never render one
		// that Validate would refuse.
		return bad(recipeErr(r, "name", "%v", err))
	}
	if r.Cluster == "" {
		return bad(fmt.Errorf("%s: cluster: empty: pass --cluster, set default_cluster in the fleet config, or set cluster in the recipe", r.File))
	}
	if !in(Runtimes, r.Runtime) {
		return bad(recipeErr(r, "runtime", "unknown runtime %q: use one of %s", r.Runtime, strings.Join(Runtimes, ", ")))
	}
	c := cfg.Cluster(r.Cluster)
	if c == nil {
		return bad(recipeErr(r, "cluster", "unknown cluster %q — known clusters: %s", r.Cluster, strings.Join(clusterNames(cfg), ", ")))
	}
	var nodes []*Node
	for _, name := range c.Nodes {
		n := cfg.Node(name)
		if n == nil {
			return bad(fmt.Errorf("%s: cluster %s names unknown node %q", cfg.File, c.Name, name))
		}
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return bad(fmt.Errorf("%s: cluster %s has no nodes", cfg.File, c.Name))
	}
	for k := range overrides {
		if in(fixedKeys, k) {
			return bad(fmt.Errorf("-o %s: %s is set per node by sparklane and cannot be overridden", k, k))
		}
	}
	for k := range r.Defaults {
		if in(fixedKeys, k) {
			return bad(recipeErr(r, "defaults."+k, "%s is set per node by sparklane: rename this default", k))
		}
	}
	var warnings []string
	if r.MinNodes > len(nodes) {
		return bad(recipeErr(r, "min_nodes", "lane needs %d nodes but cluster %s has %d", r.MinNodes, c.Name, len(nodes)))
	}
	if r.MaxNodes > 0 && r.MaxNodes < len(nodes) {
		warnings = append(warnings, fmt.Sprintf("%s: max_nodes %d: runs on the first %d of cluster %s's %d nodes (%s)", r.File, r.MaxNodes, r.MaxNodes, c.Name, len(nodes), strings.Join(c.Nodes[:r.MaxNodes], ", ")))
		nodes = nodes[:r.MaxNodes]
	}
	pp, dp, tpDefault := 1, 1, 0
	if r.Format == "sparkrun" {
		// sparkrun runs a recipe on tp×pp×dp nodes (one GPU each), the
		// first ones of the cluster.
		// An unset tensor_parallel is 1, as in sparkrun.
		tp, tpOK := worldInt(r, overrides, "tensor_parallel")
		if _, set := overrides["tensor_parallel"]; !set {
			if _, set = r.Defaults["tensor_parallel"]; !set {
				tp, tpOK, tpDefault = 1, true, 1
			}
		}
		pp, _ = worldInt(r, overrides, "pipeline_parallel")
		dp, _ = worldInt(r, overrides, "data_parallel")
		pp, dp = max(pp, 1), max(dp, 1)
		if need := max(tp*pp*dp, r.MinNodes); tpOK && tp > 0 && need < len(nodes) {
			why := fmt.Sprintf("tensor_parallel %d × pipeline_parallel %d × data_parallel %d = %d", tp, pp, dp, tp*pp*dp)
			if need > tp*pp*dp {
				why = fmt.Sprintf("min_nodes %d", need)
			}
			warnings = append(warnings, fmt.Sprintf("%s: %s: runs on the first %d of cluster %s's nodes (%s)", r.File, why, need, c.Name, joinNodeNames(nodes[:need])))
			nodes = nodes[:need]
		} else if tpOK && need > len(nodes) {
			return bad(recipeErr(r, "defaults.tensor_parallel", "tensor_parallel %d × pipeline_parallel %d × data_parallel %d = %d nodes, but cluster %s has %d (one GPU each): pick a bigger cluster or lower them with -o", tp, pp, dp, need, c.Name, len(nodes)))
		}
	}
	nnodes := len(nodes)
	head := headAddr(nodes[0])

	// model_path: the export mount of the model's repo when one is staged,
	// else the model id (resolved through HF_HUB_CACHE).
	modelPath := "{model}"
	for _, s := range r.Staging {
		for _, e := range s.Exports {
			if e.Repo == r.Model && e.Mount != "" && s.Kind == "hub-mirror" {
				modelPath = e.Mount
			}
		}
	}

	plan := &LanePlan{Lane: r.Name, Cluster: c.Name, Runtime: r.Runtime, HeadAddr: head, Warnings: append(append([]string{}, r.LoadWarnings...), warnings...)}
	distDefault := DefaultDistPort
	if r.Format == "sparkrun" {
		distDefault = SparkrunDistPort
	}
	usedAny := map[string]bool{}
	for rank, n := range nodes {
		v := &vars{file: r.File, raw: map[string]string{}, where: map[string]string{},
			done: map[string]string{}, busy: map[string]bool{}, used: map[string]bool{}}
		set := func(k, val, where string) { v.raw[k], v.where[k] = val, where }
		set("model", r.Model, "model")
		set("image", r.Image, "image")
		set("port", strconv.Itoa(DefaultAPIPort), "defaults.port")
		set("dist_port", strconv.Itoa(distDefault), "defaults.dist_port")
		set("model_revision", r.ModelRevision, "model_revision")
		set("master_port", "{dist_port}", "defaults.master_port")
		if tpDefault > 0 {
			set("tensor_parallel", strconv.Itoa(tpDefault), "defaults.tensor_parallel")
		} else {
			set("tensor_parallel", strconv.Itoa(nnodes), "defaults.tensor_parallel")
		}
		set("expert_parallel", "1", "defaults.expert_parallel")
		set("model_path", modelPath, "defaults.model_path")
		for k, val := range r.Defaults {
			set(k, valueString(val), "defaults."+k)
		}
		for k, val := range overrides {
			set(k, val, "-o "+k)
		}
		// A recipe or override that sets only master_port still moves the
		// rendezvous: dist_port follows it.
		_, dDist := r.Defaults["dist_port"]
		_, oDist := overrides["dist_port"]
		_, dMaster := r.Defaults["master_port"]
		_, oMaster := overrides["master_port"]
		if (oMaster && !oDist) || (dMaster && !dDist && !oDist) {
			set("dist_port", "{master_port}", v.where["master_port"])
		}
		set("lane", r.Name, "lane")
		set("node", n.Name, "node")
		set("node_rank", strconv.Itoa(rank), "node_rank")
		set("nnodes", strconv.Itoa(nnodes), "nnodes")
		set("head_addr", head, "head_addr")
		set("node_addr", headAddr(n), "node_addr")
		set("hf_cache_dir", cfg.HFCacheDir, "hf_cache_dir")

		np, err := renderNode(cfg, r, v, nodes, rank, pp, dp)
		if err != nil {
			return bad(err)
		}
		if rank == 0 {
			plan.Model, _ = v.get("model", nil)
			plan.APIPort, _ = v.intValue("port")
			plan.TP, _ = v.intValue("tensor_parallel")
		}
		plan.Nodes = append(plan.Nodes, *np)
		for k := range v.used {
			usedAny[k] = true
		}
	}
	for _, k := range sortedStrings(overrides) {
		if !usedAny[k] {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("-o %s=%s is not used by any placeholder of %s (command, env, mounts, defaults): check the key name", k, overrides[k], r.File))
		}
	}
	for _, k := range sortedStrings(r.Env) {
		// A sparkrun "$VAR" secret is left unexpanded and warned about by
		// the loader already.
		if secretenv.LooksSecret(k) && r.Env[k] != "" && !strings.Contains(r.Env[k], "$") {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("%s: env.%s looks like a secret: a value in [env] travels in workflow inputs and stays in the Temporal history; move it to [env_from] (%s = \"env:NAME\" or \"file:/path\" on the node)", r.File, k, k))
		}
	}
	for i, s := range r.Staging {
		if s.RowsEnv != "" && s.Rows == 0 {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("%s: staging[%d].rows_env %s is filled by the serve step from the staged row manifest (rows not given in the recipe)", r.File, i, s.RowsEnv))
		}
	}
	h, err := RecipeHash(r, overrides)
	if err != nil {
		return nil, err
	}
	plan.RecipeHash = h
	plan.Relay = relayPlan(cfg, r, nodes)
	return plan, nil
}

// RelayOn reports whether staging relays between nodes: the recipe's
// relay key, else the config's, else on.
func RelayOn(cfg *Config, r *Recipe) bool {
	if r != nil && r.Relay != nil {
		return *r.Relay
	}
	if cfg != nil && cfg.Relay != nil {
		return *cfg.Relay
	}
	return true
}

// relayPlan is the lane's relay plan, or nil when the lane is staged
// without relaying: relay off, a single node, or a node with no address
// for its peers to reach.
func relayPlan(cfg *Config, r *Recipe, nodes []*Node) *RelayPlan {
	if !RelayOn(cfg, r) || len(nodes) < 2 {
		return nil
	}
	rp := &RelayPlan{Peers: map[string]string{}}
	for _, n := range nodes {
		if n.Address == "" {
			return nil
		}
		rp.Peers[n.Name] = net.JoinHostPort(n.Address, strconv.Itoa(cfg.RelayPort))
	}
	return rp
}

func sortedStrings(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// sparkrunClusterEnv is what sparkrun's runtime plugins add on a
// multi-node launch (their get_cluster_env), under the recipe's env.
var sparkrunClusterEnv = map[string]map[string]string{
	"vllm":   {"NCCL_CUMEM_ENABLE": "0", "OMP_NUM_THREADS": "4"},
	"sglang": {"NCCL_CUMEM_ENABLE": "0", "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": "0"},
}

// worldInt is an integer world-shape key from -o or [defaults]; ok=false
// when unset or not an integer (a placeholder: left to rendering).
func worldInt(r *Recipe, overrides map[string]string, key string) (int, bool) {
	s, ok := overrides[key]
	if !ok {
		v, ok := r.Defaults[key]
		if !ok {
			return 0, false
		}
		s = valueString(v)
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	return n, err == nil
}

func joinNodeNames(nodes []*Node) string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	return strings.Join(names, ", ")
}

func renderNode(cfg *Config, r *Recipe, v *vars, nodes []*Node, rank, pp, dp int) (*NodePlan, error) {
	n, nnodes, head := nodes[rank], len(nodes), headAddr(nodes[0])
	image, err := v.render("image", r.Image)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(image) == "" {
		return nil, recipeErr(r, "image", "missing: pin the container image the lane runs")
	}
	tp, err := v.intValue("tensor_parallel")
	if err != nil {
		return nil, err
	}
	if tp < 1 || tp > nnodes {
		return nil, recipeErr(r, v.where["tensor_parallel"], "tensor_parallel %d does not fit cluster %s of %d nodes (one GPU each)", tp, r.Cluster, nnodes)
	}
	distPort, err := v.intValue("dist_port")
	if err != nil {
		return nil, err
	}
	if _, err := v.intValue("port"); err != nil {
		return nil, err
	}
	ep, err := v.intValue("expert_parallel")
	if err != nil {
		return nil, err
	}

	argv, err := renderArgv(r, v)
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, recipeErr(r, "command", "renders to nothing: give the serve command")
	}
	if r.Runtime == "vllm" && dp > 1 {
		argv = appendVLLMDataParallel(argv, nodes, rank, distPort, dp, v)
	} else if nnodes > 1 {
		argv = appendWorldFlags(r.Runtime, argv, head, distPort, nnodes, rank)
	}

	// The node's communication env and, for a sparkrun recipe that stages
	// nothing, the HF cache offline env; the recipe's env wins over both.
	env := commEnv(n)
	if r.Format == "sparkrun" && nnodes > 1 {
		for k, val := range sparkrunClusterEnv[r.Runtime] {
			env[k] = val
		}
	}
	var hfMount *Mount
	if r.Format == "sparkrun" && len(r.Staging) == 0 && cfg.HFCacheDir != "" {
		env["HF_HOME"] = SparkrunHFHome
		env["HF_HUB_OFFLINE"] = "1"
		env["TRANSFORMERS_OFFLINE"] = "1"
		m := Mount{Src: filepath.Clean(cfg.HFCacheDir), Dst: SparkrunHFHome + "/hub", ReadOnly: true}
		if checkMountSource(cfg, n, m.Src, true) != nil {
			m.Host = true // the operator's hf_cache_dir, not a recipe's choice
		}
		hfMount = &m
	}
	for _, k := range sortedStrings(r.Env) {
		val, err := v.render("env."+k, r.Env[k])
		if err != nil {
			return nil, err
		}
		env[k] = val
	}
	if _, ok := r.Defaults["expert_parallel"]; !ok {
		if e, ok := env["EP_SIZE"]; ok {
			if n, err := strconv.Atoi(strings.TrimSpace(e)); err == nil {
				ep = n
			} else {
				return nil, recipeErr(r, "env.EP_SIZE", "%q is not an integer", e)
			}
		}
	}

	mounts, err := renderMounts(cfg, r, v, n, env, rank, tp, hfMount)
	if err != nil {
		return nil, err
	}
	spec, err := containerSpec(r, n)
	if err != nil {
		return nil, err
	}
	var pre []PreExec
	for i, p := range r.PreExec {
		run, err := v.render(fmt.Sprintf("pre_exec[%d]", i), p.Run)
		if err != nil {
			return nil, err
		}
		pre = append(pre, PreExec{Run: run, Copy: p.Copy, Dest: p.Dest})
	}

	// World shape last: engine adapters read these, so they are never left
	// to whatever the image defaults to.
	env["NODE_RANK"] = strconv.Itoa(rank)
	env["NNODES"] = strconv.Itoa(nnodes)
	env["TP_SIZE"] = strconv.Itoa(tp)
	env["EP_SIZE"] = strconv.Itoa(ep)
	env["MASTER_ADDR"] = head
	env["MASTER_PORT"] = strconv.Itoa(distPort)

	return &NodePlan{
		Node:          n.Name,
		Rank:          rank,
		Head:          rank == 0,
		ContainerName: ContainerName(r.Name, rank),
		Image:         image,
		Command:       JoinArgs(argv),
		Argv:          argv,
		Env:           env,
		EnvFrom:       copyStrings(r.EnvFrom),
		Mounts:        mounts,
		GPUs:          r.Runtime != "sim",
		Container:     spec,
		PreExec:       pre,
		RowsFrom:      rowsFrom(r, rank, tp),
	}, nil
}

// rowsFrom lists the sparse-rows blocks whose rows_env the serve step fills
// from the staged data on the node of rank (ranks beyond the TP group hold
// the split of their rank modulo tp, as staging tiles them).
func rowsFrom(r *Recipe, rank, tp int) []RowsFrom {
	var out []RowsFrom
	for _, s := range r.Staging {
		if s.Kind != "sparse-rows" || s.RowsEnv == "" || tp < 1 {
			continue
		}
		out = append(out, RowsFrom{Env: s.RowsEnv, Dst: s.Dst, Format: s.Format, Layers: append([]int(nil), s.Layers...), Rows: s.Rows, Rank: rank % tp, TP: tp})
	}
	return out
}

// checkMountSource says why src may not be bound on node n: not absolute,
// a ".." in it, outside the node's roots and shared_roots (compared after
// the node's fs_root mapping, as the node worker binds it), or on a shared
// root without read_only.
func checkMountSource(cfg *Config, n *Node, src string, readOnly bool) error {
	if !filepath.IsAbs(src) {
		return fmt.Errorf("%q is not absolute", src)
	}
	if hasDotDot(src) {
		return fmt.Errorf("%s contains \"..\": write the source without it", src)
	}
	local := n.LocalPath(src, cfg.SharedRoots)
	for _, root := range n.Roots {
		lr := n.LocalPath(root, cfg.SharedRoots)
		if local == filepath.Clean(lr) || isUnder(local, filepath.Clean(lr)) {
			return nil
		}
	}
	c := filepath.Clean(src)
	for _, sr := range cfg.SharedRoots {
		sr = filepath.Clean(sr)
		if c == sr || isUnder(c, sr) {
			if !readOnly {
				return fmt.Errorf("%s is on shared root %s, which containers may only read: set read_only = true", src, sr)
			}
			return nil
		}
	}
	return fmt.Errorf("%s is outside node %s's roots %v and shared_roots %v: bind a path under them, or set host = true on the mount if it is a host path on purpose (recipe check lists host mounts)", src, n.Name, n.Roots, cfg.SharedRoots)
}

// checkCreateSource refuses create = true on a source the serve step must
// not make: a host path, or one on a shared root (the NAS), or outside the
// node's roots.
func checkCreateSource(cfg *Config, n *Node, src string, host bool) error {
	if host {
		return fmt.Errorf("%s is a host path (host = true): sparklane creates mount sources only under the node's roots; drop create or host", src)
	}
	local := n.LocalPath(src, cfg.SharedRoots)
	for _, root := range n.Roots {
		lr := filepath.Clean(n.LocalPath(root, cfg.SharedRoots))
		if local != lr && isUnder(local, lr) {
			return nil
		}
	}
	return fmt.Errorf("%s is not strictly under one of node %s's roots %v: a created source must be (not a shared root, not a root itself)", src, n.Name, n.Roots)
}

// checkSkipBindOverlap refuses a recipe mount whose container path is one
// the staging manifest binds: a file of an export that the block's skip
// globs keep on the NAS is bound read-only, file by file, from the export's
// bind manifest at serve time (page15 on exl3). A hand-written mount of the
// same path would make Docker refuse the container at start, on every node;
// here it is a render error naming both.
func checkSkipBindOverlap(r *Recipe, i int, dst string) error {
	d := filepath.Clean(dst)
	for si, s := range r.Staging {
		if s.Kind != "hub-mirror" || len(s.Skip) == 0 {
			continue
		}
		for ei, e := range s.Exports {
			if e.Mount == "" {
				continue
			}
			m := filepath.Clean(e.Mount)
			if !isUnder(d, m) {
				continue
			}
			rel, err := filepath.Rel(m, d)
			if err != nil {
				continue
			}
			for _, g := range s.Skip {
				if ok, _ := doublestar.Match(g, filepath.ToSlash(rel)); ok {
					return recipeErr(r, fmt.Sprintf("mounts[%d].dst", i), "%s is also bound by staging[%d] (export of %s at %s): %s matches its skip glob %q, so the staging manifest binds that NAS file there read-only at serve time; remove this [[mounts]] entry (two binds at one path are refused by Docker)", dst, si, s.Exports[ei].Repo, e.Mount, rel, g)
				}
			}
		}
	}
	return nil
}

// ContainerName is the deterministic name of a lane's rank container, so a
// retried start looks before it creates. Render only calls it for lanes
// whose name passed ValidName, so it is always a valid Docker name.
func ContainerName(lane string, rank int) string {
	return fmt.Sprintf("sparklane-%s-r%d", lane, rank)
}

// hasFlag reports whether argv already carries flag (as "--f" or "--f=v").
func hasFlag(argv []string, flag string) bool {
	for _, a := range argv {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			return true
		}
	}
	return false
}

// appendWorldFlags adds the engine's multi-node flags the command does not
// already carry: SGLang (and sim) --dist-init-addr/--nnodes/--node-rank;
// vLLM native --nnodes/--node-rank/--master-addr/--master-port, workers
// --headless. exllamav3 reads the world shape from env only.
func appendWorldFlags(runtime string, argv []string, head string, port, nnodes, rank int) []string {
	add := func(flag string, val ...string) {
		if !hasFlag(argv, flag) {
			argv = append(argv, flag)
			argv = append(argv, val...)
		}
	}
	switch runtime {
	case "sglang", "sim":
		add("--dist-init-addr", net.JoinHostPort(head, strconv.Itoa(port)))
		add("--nnodes", strconv.Itoa(nnodes))
		add("--node-rank", strconv.Itoa(rank))
	case "vllm":
		add("--nnodes", strconv.Itoa(nnodes))
		add("--node-rank", strconv.Itoa(rank))
		add("--master-addr", head)
		add("--master-port", strconv.Itoa(port))
		if rank > 0 {
			add("--headless")
		}
	}
	return argv
}

// appendVLLMDataParallel adds vLLM's flags for dp > 1 as sparkrun renders
// them: nodes form dp replicas of nnodes/dp consecutive nodes; within a
// replica of more than one node the torch-distributed flags point at the
// replica's first node (workers --headless); every node gets
// --data-parallel-size/-rank/-address/-rpc-port, the address being the head.
func appendVLLMDataParallel(argv []string, nodes []*Node, rank, port, dp int, v *vars) []string {
	replica := max(len(nodes)/dp, 1)
	dpRank, inner := rank/replica, rank%replica
	add := func(flag string, val ...string) {
		if !hasFlag(argv, flag) {
			argv = append(argv, flag)
			argv = append(argv, val...)
		}
	}
	if replica > 1 {
		add("--nnodes", strconv.Itoa(replica))
		add("--node-rank", strconv.Itoa(inner))
		add("--master-addr", headAddr(nodes[dpRank*replica]))
		add("--master-port", strconv.Itoa(port))
		if inner > 0 {
			add("--headless")
		}
	}
	rpc := strconv.Itoa(DefaultDPRPCPort)
	if _, ok := v.raw["data_parallel_rpc_port"]; ok {
		if s, err := v.get("data_parallel_rpc_port", nil); err == nil && s != "" {
			rpc = s
		}
	}
	add("--data-parallel-size", strconv.Itoa(dp))
	add("--data-parallel-rank", strconv.Itoa(dpRank))
	add("--data-parallel-address", headAddr(nodes[0]))
	add("--data-parallel-rpc-port", rpc)
	return argv
}

// renderMounts binds the recipe's mounts and the staged data: sparse-rows
// dst at its mount (read-only, EnvVar pointing at it); a hub mirror's
// DST/hub where the recipe bound hf_cache_dir (HF_HUB_CACHE set, offline);
// export trees read-only at their mounts.
//
// A recipe mount's source must lie inside one of node n's roots or a
// shared root (read-only there, as node workers bind the NAS) unless the
// mount says host = true: a recipe cannot bind /etc by accident.
func renderMounts(cfg *Config, r *Recipe, v *vars, n *Node, env map[string]string, rank, tp int, hfMount *Mount) ([]Mount, error) {
	var hub *Staging
	for i := range r.Staging {
		if r.Staging[i].Kind == "hub-mirror" {
			hub = &r.Staging[i]
			break
		}
	}
	hfRoot := ""
	if cfg.HFCacheDir != "" {
		hfRoot = filepath.Clean(cfg.HFCacheDir)
	}
	var mounts []Mount
	hubBound := false
	hubMount := ""
	if hub != nil && hub.Mount != "" {
		hubMount = hub.Mount
	}
	if hfMount != nil {
		mounts = append(mounts, *hfMount)
	}
	for i, m := range r.Mounts {
		src, err := v.render(fmt.Sprintf("mounts[%d].src", i), m.Src)
		if err != nil {
			return nil, err
		}
		dst, err := v.render(fmt.Sprintf("mounts[%d].dst", i), m.Dst)
		if err != nil {
			return nil, err
		}
		// The recipe's bind of the NAS hub cache is replaced by the node's
		// staged mirror: serving from the NAS is what staging exists to avoid.
		// Deeper per-file binds (kept on the NAS on purpose) stay.
		if hub != nil && hfRoot != "" && !hubBound && (filepath.Clean(src) == hfRoot || filepath.Clean(src) == filepath.Join(hfRoot, "hub")) {
			if hubMount == "" {
				hubMount = dst
			}
			mounts = append(mounts, Mount{Src: hub.HubDir(), Dst: hubMount, ReadOnly: true})
			hubBound = true
			continue
		}
		if !m.Host {
			if err := checkMountSource(cfg, n, src, m.ReadOnly); err != nil {
				return nil, recipeErr(r, fmt.Sprintf("mounts[%d].src", i), "%v", err)
			}
		}
		if m.Create {
			if err := checkCreateSource(cfg, n, src, m.Host); err != nil {
				return nil, recipeErr(r, fmt.Sprintf("mounts[%d].create", i), "%v", err)
			}
		}
		if err := checkSkipBindOverlap(r, i, dst); err != nil {
			return nil, err
		}
		mounts = append(mounts, Mount{Src: src, Dst: dst, ReadOnly: m.ReadOnly, Host: m.Host, Create: m.Create})
	}
	for i, s := range r.Staging {
		switch s.Kind {
		case "hub-mirror":
			if &r.Staging[i] == hub {
				if !hubBound {
					if hubMount == "" {
						hubMount = DefaultHubCacheMount
					}
					mounts = append(mounts, Mount{Src: s.HubDir(), Dst: hubMount, ReadOnly: true})
				}
				env["HF_HUB_CACHE"] = hubMount
				env["HF_HUB_OFFLINE"] = "1"
			} else if s.Mount != "" {
				mounts = append(mounts, Mount{Src: s.HubDir(), Dst: s.Mount, ReadOnly: true})
			}
			for _, e := range s.Exports {
				if e.Mount != "" {
					mounts = append(mounts, Mount{Src: s.ExportPath(e), Dst: e.Mount, ReadOnly: true})
				}
			}
		case "sparse-rows":
			if s.Mount != "" {
				mounts = append(mounts, Mount{Src: s.Dst, Dst: s.Mount, ReadOnly: true})
				if s.EnvVar != "" {
					env[s.EnvVar] = s.Mount
				}
			}
			if s.RowsEnv != "" && s.Rows > 0 {
				// The table's total (the runtime tiles it itself); the
				// rank must own rows of it.
				if _, err := tileCount(s.Rows, tp, rank); err != nil {
					return nil, recipeErr(r, fmt.Sprintf("staging[%d].rows", i), "%v", err)
				}
				env[s.RowsEnv] = strconv.FormatInt(s.Rows, 10)
			}
		}
	}
	seen := map[string]string{}
	for _, m := range mounts {
		d := filepath.Clean(m.Dst)
		if prev, dup := seen[d]; dup {
			return nil, recipeErr(r, "mounts", "two binds land at %s (%s and %s): Docker refuses duplicate mount points; change one dst", d, prev, m.Src)
		}
		seen[d] = m.Src
	}
	// Parents before children (an export at /model before per-file binds
	// under /model/...), whatever order the recipe listed them in.
	sort.SliceStable(mounts, func(i, j int) bool { return depth(mounts[i].Dst) < depth(mounts[j].Dst) })
	return mounts, nil
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

// tileCount is the number of rows rank owns of rows split over tp ranks,
// the same split as sparserows.Tile (kept here so config does not import an
// engine): base = rows/tp, plus one for ranks below rows%tp.
func tileCount(rows int64, tp, rank int) (int64, error) {
	if rank >= tp {
		// Ranks beyond the TP group (tensor_parallel < nnodes) hold the
		// same split as their rank modulo tp.
		rank %= tp
	}
	if rows < int64(tp) {
		return 0, fmt.Errorf("table has %d rows, fewer than tp=%d ranks", rows, tp)
	}
	count := rows / int64(tp)
	if int64(rank) < rows%int64(tp) {
		count++
	}
	return count, nil
}

// RecipeHash identifies what a lane runs: sha256 of the canonical JSON of
// the recipe (without its file path) and the -o overrides. A running
// lane whose hash differs from the recipe's is stale.
func RecipeHash(r *Recipe, overrides map[string]string) (string, error) {
	cp := *r
	cp.File = ""
	if overrides == nil {
		overrides = map[string]string{}
	}
	b, err := json.Marshal(struct {
		Recipe    Recipe            `json:"recipe"`
		Overrides map[string]string `json:"overrides"`
	}{cp, overrides})
	if err != nil {
		return "", fmt.Errorf("hash recipe %s: %w", r.File, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// renderArgv splits the command template into shell words first and only
// then fills each word's placeholders, so a value is always one argument:
// a model path with a space stays one word, and -o port="1 --evil" is the
// single (bad) argument "1 --evil", never an extra flag. A word that is
// nothing but one placeholder and renders empty is dropped, as an unquoted
// empty variable is in sh: {extra_args} = "" leaves no "" argument behind.
func renderArgv(r *Recipe, v *vars) ([]string, error) {
	words, err := SplitArgs(r.Command)
	if err != nil {
		return nil, recipeErr(r, "command", "%v", err)
	}
	argv := make([]string, 0, len(words))
	for _, w := range words {
		out, err := v.render("command", w)
		if err != nil {
			return nil, err
		}
		if out == "" && wholePlaceholder(w) {
			continue
		}
		// sparkrun splices values into the command text before the shell
		// splits it, so a recipe's own default "1 2 4 8" is four
		// arguments there; the same here for a sparkrun recipe's
		// [defaults] (the author's text). Values from -o stay one word.
		if r.Format == "sparkrun" && wholePlaceholder(w) && strings.ContainsAny(out, " \t\n") {
			key := w[1 : len(w)-1]
			if _, own := r.Defaults[key]; own && v.where[key] == "defaults."+key && !quotedPlaceholder(r.Command, key) {
				words, err := SplitArgs(out)
				if err != nil {
					return nil, recipeErr(r, "defaults."+key, "%v", err)
				}
				argv = append(argv, words...)
				continue
			}
		}
		argv = append(argv, out)
	}
	return argv, nil
}

// quotedPlaceholder says whether {key} is written inside quotes in the
// command ('{key}' or "{key}"), where the shell keeps it one word.
func quotedPlaceholder(command, key string) bool {
	p := "{" + key + "}"
	for i := strings.Index(command, p); i >= 0; {
		if i > 0 && (command[i-1] == '\'' || command[i-1] == '"') {
			return true
		}
		j := strings.Index(command[i+len(p):], p)
		if j < 0 {
			break
		}
		i += len(p) + j
	}
	return false
}

func wholePlaceholder(w string) bool {
	m := placeholderRE.FindStringIndex(w)
	return m != nil && m[0] == 0 && m[1] == len(w)
}

// SplitArgs splits a command into words by sh's rules (go-shellquote):
// whitespace separates words, a backslash-newline continues the line,
// single quotes are literal, double quotes allow \" \\ \$ \` escapes, a bare
// backslash escapes the next character. No expansion of any kind is done.
func SplitArgs(s string) ([]string, error) {
	words, err := shellquote.Split(strings.ReplaceAll(s, "\r\n", "\n"))
	if err != nil {
		return nil, fmt.Errorf("%v: close the quote or drop the trailing backslash", strings.ToLower(err.Error()[:1])+err.Error()[1:])
	}
	return words, nil
}

// JoinArgs is the inverse of SplitArgs (go-shellquote's Join): one line,
// each argument quoted only when it needs to be, so the printed command
// can be pasted into a shell and splits back into the same argv.
func JoinArgs(argv []string) string {
	return shellquote.Join(argv...)
}

// copyStrings copies m (nil for an empty one), so a plan never aliases
// its recipe's maps.
func copyStrings(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
