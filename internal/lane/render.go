package lane

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/memfit"
	"github.com/sparklane/sparklane/internal/engine/secretenv"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/tardir"
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
	// DefaultAPIPort is the {port} a recipe that sets none serves on.
	DefaultAPIPort = 8000
	// DefaultHubCacheMount is where a staged hub mirror is bound when the
	// recipe does not bind hf_cache_dir anywhere itself.
	DefaultHubCacheMount = "/root/.cache/huggingface/hub"
)

// Render turns a recipe into what each node of its cluster runs, in cluster
// order (rank = index, head = rank 0): container name, image, command with
// placeholders filled and the engine's multi-node flags, env with the world
// shape, and mounts with staged data bound in. overrides are -o key=value
// and win over [defaults]. Render reads no files; mount sources are recipe
// paths that node workers map with config.Node.LocalPath.
func Render(cfg *config.Config, r *config.Recipe, overrides map[string]string) (*contract.LanePlan, error) {
	return RenderOn(cfg, r, "", overrides)
}

// RenderOn is Render on a cluster chosen by the operator: cluster (from
// --cluster) wins over the recipe's own, and a recipe without one (every
// sparkrun recipe) falls back to the config's default_cluster. The recipe
// is not changed.
func RenderOn(cfg *config.Config, r *config.Recipe, cluster string, overrides map[string]string) (*contract.LanePlan, error) {
	if cfg == nil || r == nil {
		return nil, errors.New("render: config and recipe are required")
	}
	w := Wire(r)
	if cluster == "" {
		cluster = w.Cluster
	}
	if cluster == "" {
		cluster = cfg.DefaultCluster
	}
	w.Cluster = cluster
	plan, err := render(cfg, &w, append(slices.Clip(r.LoadWarnings), buildWarnings(r, w.Build)...), overrides)
	if err != nil {
		return nil, err
	}
	if err := checkBuild(cfg, r, plan, w.Build); err != nil {
		return nil, err
	}
	return plan, nil
}

// renderer is one render of a recipe on its cluster: the inputs, and what
// the steps before the per-node rendering decide (the nodes it runs on and
// the world shape).
type renderer struct {
	cfg       *config.Config
	r         *contract.Recipe
	overrides map[string]string
	cluster   *config.Cluster
	nodes     []*config.Node
	// dp is sparkrun's data parallel size (1 for a TOML recipe);
	// tpDefault is the tensor_parallel a recipe that sets none gets (0:
	// the node count).
	dp, tpDefault int
	warnings      []string
}

// render is RenderOn's work on the wire recipe r (already on its cluster):
// pick the nodes, shape the world, render each node, then the lane-wide
// warnings, the hash and the relay plan. loadWarnings lead the plan's
// warnings.
func render(cfg *config.Config, r *contract.Recipe, loadWarnings []string, overrides map[string]string) (*contract.LanePlan, error) {
	bad := func(err error) (*contract.LanePlan, error) { return nil, fault.Permanent(fault.InvalidSpec, err) }
	rd := &renderer{cfg: cfg, r: r, overrides: overrides, dp: 1}
	if err := rd.pickNodes(); err != nil {
		return bad(err)
	}
	if err := rd.worldShape(); err != nil {
		return bad(err)
	}
	plan := &contract.LanePlan{Lane: r.Name, Cluster: rd.cluster.Name, Runtime: r.Runtime, HeadAddr: headAddr(rd.nodes[0]),
		Warnings: append(append([]string{}, loadWarnings...), rd.warnings...)}
	usedAny := map[string]bool{}
	var head *vars
	for rank, n := range rd.nodes {
		v := rd.nodeVars(rank, n)
		if rank == 0 {
			head = v
		}
		np, err := renderNode(cfg, r, v, rd.nodes, rank, rd.dp)
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
	plan.Warnings = append(plan.Warnings, carryMods(plan)...)
	if err := rd.postHooks(plan, head); err != nil {
		return bad(err)
	}
	for k := range head.used { // an override only a post hook reads
		usedAny[k] = true
	}
	if err := rd.unknownOverrides(usedAny); err != nil {
		return bad(err)
	}
	plan.Warnings = append(plan.Warnings, rd.laneWarnings()...)
	h, err := RecipeHash(r, overrides)
	if err != nil {
		return nil, err
	}
	plan.RecipeHash = h
	plan.Relay = relayPlan(cfg, r, rd.nodes)
	plan.ImageInsecureRegistries, plan.ConfigFile = cfg.ImageInsecureRegistries, cfg.File
	return plan, nil
}

// pickNodes checks what the recipe must be to render at all and finds its
// cluster's nodes, cut to max_nodes.
func (rd *renderer) pickNodes() error {
	r, cfg := rd.r, rd.cfg
	if err := config.ValidName(r.Name); err != nil {
		// The name becomes container names and paths: never render one
		// that validation would refuse.
		return recipeErr(r, "name", "%v", err)
	}
	if r.Cluster == "" {
		return fmt.Errorf("%s: cluster: empty: pass --cluster, set default_cluster in the fleet config, or set cluster in the recipe", r.File)
	}
	if !slices.Contains(config.Runtimes, r.Runtime) {
		return recipeErr(r, "runtime", "unknown runtime %q: use one of %s", r.Runtime, strings.Join(config.Runtimes, ", "))
	}
	c := cfg.Cluster(r.Cluster)
	if c == nil {
		return recipeErr(r, "cluster", "unknown cluster %q — known clusters: %s", r.Cluster, strings.Join(cfg.ClusterNames(), ", "))
	}
	rd.cluster = c
	if err := checkTopology(cfg, c); err != nil {
		return err
	}
	for _, name := range c.Nodes {
		n := cfg.Node(name)
		if n == nil {
			return fmt.Errorf("%s: cluster %s names unknown node %q", cfg.File, c.Name, name)
		}
		rd.nodes = append(rd.nodes, n)
	}
	if len(rd.nodes) == 0 {
		return fmt.Errorf("%s: cluster %s has no nodes", cfg.File, c.Name)
	}
	for k := range rd.overrides {
		if slices.Contains(config.FixedKeys, k) {
			return fmt.Errorf("-o %s: %s is set per node by sparklane and cannot be overridden", k, k)
		}
	}
	if v, ok := rd.overrides["max_model_len"]; ok && !config.Placeholder.MatchString(v) {
		// The rule [defaults] max_model_len and the memory fit read it by.
		if _, err := memfit.ParseMaxModelLen(v); err != nil {
			return fmt.Errorf("-o max_model_len=%s: %v", v, err)
		}
	}
	for k := range r.Defaults {
		if slices.Contains(config.FixedKeys, k) {
			return recipeErr(r, "defaults."+k, "%s is set per node by sparklane: rename this default", k)
		}
	}
	if r.MinNodes > len(rd.nodes) {
		return recipeErr(r, "min_nodes", "lane needs %d nodes but cluster %s has %d", r.MinNodes, c.Name, len(rd.nodes))
	}
	if r.MaxNodes > 0 && r.MaxNodes < len(rd.nodes) {
		rd.warnings = append(rd.warnings, fmt.Sprintf("%s: max_nodes %d: runs on the first %d of cluster %s's %d nodes (%s)", r.File, r.MaxNodes, r.MaxNodes, c.Name, len(rd.nodes), strings.Join(c.Nodes[:r.MaxNodes], ", ")))
		rd.nodes = rd.nodes[:r.MaxNodes]
	}
	return nil
}

// worldShape applies sparkrun's world to a sparkrun recipe: it runs on
// tp×pp×dp nodes (one GPU each), the first ones of the cluster, and an
// unset tensor_parallel is 1, as in sparkrun.
func (rd *renderer) worldShape() error {
	r, overrides := rd.r, rd.overrides
	if r.Format != "sparkrun" {
		return nil
	}
	tp, tpOK := worldInt(r, overrides, "tensor_parallel")
	if _, set := overrides["tensor_parallel"]; !set {
		if _, set = r.Defaults["tensor_parallel"]; !set {
			tp, tpOK, rd.tpDefault = 1, true, 1
		}
	}
	pp, _ := worldInt(r, overrides, "pipeline_parallel")
	dp, _ := worldInt(r, overrides, "data_parallel")
	pp, dp = max(pp, 1), max(dp, 1)
	rd.dp = dp
	world, ok := worldSize(tp, pp, dp)
	if tpOK && tp > 0 && !ok {
		return recipeErr(r, "defaults.tensor_parallel", "tensor_parallel %d × pipeline_parallel %d × data_parallel %d passes 2^63-1 nodes: not a world any cluster has; lower them", tp, pp, dp)
	}
	if need := max(world, r.MinNodes); tpOK && tp > 0 && need < len(rd.nodes) {
		why := fmt.Sprintf("tensor_parallel %d × pipeline_parallel %d × data_parallel %d = %d", tp, pp, dp, world)
		if need > tp*pp*dp {
			why = fmt.Sprintf("min_nodes %d", need)
		}
		rd.warnings = append(rd.warnings, fmt.Sprintf("%s: %s: runs on the first %d of cluster %s's nodes (%s)", r.File, why, need, rd.cluster.Name, joinNodeNames(rd.nodes[:need])))
		rd.nodes = rd.nodes[:need]
	} else if tpOK && need > len(rd.nodes) {
		return recipeErr(r, "defaults.tensor_parallel", "tensor_parallel %d × pipeline_parallel %d × data_parallel %d = %d nodes, but cluster %s has %d (one GPU each): pick a bigger cluster or lower them with -o", tp, pp, dp, need, rd.cluster.Name, len(rd.nodes))
	}
	return nil
}

// worldSize is tp × pp × dp, checked: values from a recipe or -o whose
// product passes int64 would wrap to a world of 0 nodes (or a negative
// one) and leave the render no node to run on.
func worldSize(tp, pp, dp int) (int, bool) {
	n := uint64(1)
	for _, f := range []int{tp, pp, dp} {
		if f < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(f))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		n = lo
	}
	return int(n), true
}

// modelPath is the {model_path} default: the export mount of the model's
// repo when one is staged, else the model id (resolved through
// HF_HUB_CACHE).
func modelPath(r *contract.Recipe) string {
	p := "{model}"
	for _, s := range r.Staging {
		for _, e := range s.Exports {
			if e.Repo == r.Model && e.Mount != "" && s.Kind == "hub-mirror" {
				p = e.Mount
			}
		}
	}
	return p
}

// nodeVars are the placeholders of rank's node: built-in defaults, the
// recipe's [defaults], -o overrides, then the per-node facts nothing may
// change.
func (rd *renderer) nodeVars(rank int, n *config.Node) *vars {
	r, overrides, nnodes := rd.r, rd.overrides, len(rd.nodes)
	distDefault := DefaultDistPort
	if r.Format == "sparkrun" {
		distDefault = SparkrunDistPort
	}
	v := &vars{file: r.File, raw: map[string]string{}, where: map[string]string{},
		done: map[string]string{}, busy: map[string]bool{}, used: map[string]bool{}}
	set := func(k, val, where string) { v.raw[k], v.where[k] = val, where }
	set("model", r.Model, "model")
	set("image", r.Image, "image")
	set("port", strconv.Itoa(DefaultAPIPort), "defaults.port")
	set("dist_port", strconv.Itoa(distDefault), "defaults.dist_port")
	set("model_revision", r.ModelRevision, "model_revision")
	set("master_port", "{dist_port}", "defaults.master_port")
	if rd.tpDefault > 0 {
		set("tensor_parallel", strconv.Itoa(rd.tpDefault), "defaults.tensor_parallel")
	} else {
		set("tensor_parallel", strconv.Itoa(nnodes), "defaults.tensor_parallel")
	}
	set("expert_parallel", "1", "defaults.expert_parallel")
	set("model_path", modelPath(r), "defaults.model_path")
	for k, val := range r.Defaults {
		set(k, config.ValueString(val), "defaults."+k)
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
	set("head_addr", headAddr(rd.nodes[0]), "head_addr")
	set("node_addr", headAddr(n), "node_addr")
	set("hf_cache_dir", rd.cfg.HFCacheDir, "hf_cache_dir")
	return v
}

// unknownOverrides refuses an -o key the lane does not use: no
// placeholder of its command, env, mounts or [defaults] reads it, it is
// not one of its [defaults], nor a world size sparkrun reads. A typo
// (-o tensor_paralel=2) would otherwise run the lane unchanged; the error
// names the key and the keys the lane does use.
func (rd *renderer) unknownOverrides(usedAny map[string]bool) error {
	r := rd.r
	known := map[string]bool{}
	for k := range usedAny {
		known[k] = true
	}
	for k := range r.Defaults {
		known[k] = true
	}
	if r.Format == "sparkrun" {
		for _, k := range []string{"tensor_parallel", "pipeline_parallel", "data_parallel"} {
			known[k] = true
		}
	}
	var unknown []string
	for _, k := range sortedStrings(rd.overrides) {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	var keys []string
	for k := range known {
		if !slices.Contains(config.FixedKeys, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range unknown {
		errs = append(errs, fmt.Errorf("-o %s=%s: lane %s (%s) uses no key %q in its command, env, mounts or [defaults]: known keys: %s", k, rd.overrides[k], r.Name, r.File, k, strings.Join(keys, ", ")))
	}
	return errors.Join(errs...)
}

// laneWarnings are the plan's findings about the lane as a whole: a
// literal secret in [env], a rows_env left to the serve step.
func (rd *renderer) laneWarnings() []string {
	r := rd.r
	var out []string
	for _, k := range sortedStrings(r.Env) {
		// A sparkrun "$VAR" secret is left unexpanded and warned about by
		// the loader already.
		if secretenv.LooksSecret(k) && r.Env[k] != "" && !strings.Contains(r.Env[k], "$") {
			out = append(out, fmt.Sprintf("%s: env.%s looks like a secret: a value in [env] travels in workflow inputs and stays in the Temporal history; move it to [env_from] (%s = \"env:NAME\" or \"file:/path\" on the node)", r.File, k, k))
		}
	}
	for i, s := range r.Staging {
		if s.RowsEnv != "" && s.Rows == 0 {
			out = append(out, fmt.Sprintf("%s: staging[%d].rows_env %s is filled by the serve step from the staged row manifest (rows not given in the recipe)", r.File, i, s.RowsEnv))
		}
	}
	return out
}

// relayPlan is the lane's relay plan, or nil when the lane is staged
// without relaying: relay off, a single node, or a node with no address
// for its peers to reach.
func relayPlan(cfg *config.Config, r *contract.Recipe, nodes []*config.Node) *contract.RelayPlan {
	if !config.RelayOn(cfg, r.Relay) || len(nodes) < 2 {
		return nil
	}
	rp := &contract.RelayPlan{Peers: map[string]string{}}
	for _, n := range nodes {
		if n.Address == "" {
			return nil
		}
		rp.Peers[n.Name] = net.JoinHostPort(n.Address, strconv.Itoa(cfg.RelayPort))
	}
	return rp
}

// RecipeHash identifies what a lane runs: sha256 of the canonical JSON of
// the recipe (without its file path) and the -o overrides. A running
// lane whose hash differs from the recipe's is stale.
func RecipeHash(r *contract.Recipe, overrides map[string]string) (string, error) {
	cp := *r
	cp.File = ""
	if overrides == nil {
		overrides = map[string]string{}
	}
	b, err := json.Marshal(struct {
		Recipe    contract.Recipe   `json:"recipe"`
		Overrides map[string]string `json:"overrides"`
	}{cp, overrides})
	if err != nil {
		return "", fmt.Errorf("hash recipe %s: %w", r.File, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// headAddr is where rank 0 listens for the other ranks: its data-plane
// address, else its SSH host, else loopback (a local node).
func headAddr(n *config.Node) string {
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

func joinNodeNames(nodes []*config.Node) string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	return strings.Join(names, ", ")
}

func recipeErr(r *contract.Recipe, key, format string, args ...any) error {
	return fileErr(r.File, key, format, args...)
}

func fileErr(file, key, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %s", file, key, fmt.Sprintf(format, args...))
}

func sortedStrings(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// postHooks renders the recipe's post_exec and post_commands into the
// plan with the head's placeholders plus what sparkrun's hooks get:
// {head_ip}, {head_host}, {base_url} (http://HEAD_IP:PORT/v1),
// {container_name} (the head rank's), {cache_dir} (hf_cache_dir) and
// {cluster_id} (the cluster's name). A hook is shell: every value is put
// in as one literal word (vars.renderShell), and a {NAME} no value has is
// left as written, as sparkrun leaves it.
func (rd *renderer) postHooks(plan *contract.LanePlan, v *vars) error {
	r := rd.r
	plan.StopAfterPost = r.StopAfterPost
	if len(r.PostExec)+len(r.PostCommands) == 0 {
		return nil
	}
	set := func(k, val string) {
		v.raw[k], v.where[k] = val, "post hooks"
		delete(v.done, k)
	}
	set("head_ip", plan.HeadAddr)
	set("head_host", plan.Nodes[0].Node)
	set("base_url", fmt.Sprintf("http://%s/v1", net.JoinHostPort(plan.HeadAddr, strconv.Itoa(plan.APIPort))))
	set("container_name", plan.Nodes[0].ContainerName)
	set("cache_dir", rd.cfg.HFCacheDir)
	set("cluster_id", plan.Cluster)
	var err error
	if plan.PostExec, err = v.renderShell("post_exec", r.PostExec, nil, false, true); err != nil {
		return err
	}
	plan.PostCommands, err = v.renderShell("post_commands", r.PostCommands, nil, false, true)
	return err
}

// carryMods reads each pre_exec copy (a mod directory, found on this,
// the control host) into the plan as a tar (contract.PreExec.Archive), so
// nodes get mods from the plan and a registry clone need not sit on a
// shared root. Copies past contract.MaxModArchives (every node's copy
// counted) stay a path the node reads, and the warnings say which; so does
// one this host cannot read.
func carryMods(plan *contract.LanePlan) []string {
	var warns []string
	budget := contract.MaxModArchives
	cache := map[string][]byte{}
	bad := map[string]bool{}
	for i := range plan.Nodes {
		pre := plan.Nodes[i].PreExec
		for k := range pre {
			p := &pre[k]
			if p.Copy == "" || p.Dest == "" {
				continue
			}
			key := p.Copy + "\x00" + p.Dest
			if b, ok := cache[key]; ok {
				if len(b) <= budget {
					p.Archive, budget = b, budget-len(b)
				} else if !bad[key] {
					bad[key] = true
					warns = append(warns, fmt.Sprintf("pre_exec copy %s: not carried in the plan to every node (the plan's mods would pass %d KiB over its nodes): the others read it at that path", p.Copy, contract.MaxModArchives>>10))
				}
				continue
			}
			if bad[key] {
				continue
			}
			if st, err := os.Stat(p.Copy); err != nil || !st.IsDir() {
				continue // not here: the node reads it (and says so when it lacks it too)
			}
			var buf bytes.Buffer
			err := tardir.Write(&limitWriter{w: &buf, n: budget}, p.Copy, p.Dest)
			if err != nil {
				bad[key] = true
				warns = append(warns, fmt.Sprintf("pre_exec copy %s: not carried in the plan (%v): each node reads it at that path", p.Copy, err))
				continue
			}
			cache[key] = buf.Bytes()
			p.Archive, budget = cache[key], budget-buf.Len()
		}
	}
	return warns
}

// limitWriter fails a write past n bytes.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(b []byte) (int, error) {
	if len(b) > l.n {
		return 0, fmt.Errorf("the plan's mods would pass %d KiB over its nodes", contract.MaxModArchives>>10)
	}
	l.n -= len(b)
	return l.w.Write(b)
}
