package lane

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

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
	out := config.Placeholder.ReplaceAllStringFunc(s, func(m string) string {
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

// renderShell renders cmds, the shell commands of the recipe's list key
// (cmds[i] is key[at[i]]; at nil: key[i]), with every placeholder value
// one literal word wherever it lands (contract.RenderShell, the one owner
// of shell quoting; `command` is quoted by the same contract.QuoteWord).
// script says the commands run as one script (pre_exec); else each runs
// alone (post hooks: sh -c each). keep leaves a {NAME} without a value as
// written (a hook's own shell text) instead of failing. Errors name the
// file and key[i].
func (v *vars) renderShell(key string, cmds []string, at []int, script, keep bool) ([]string, error) {
	if len(cmds) == 0 {
		return nil, nil
	}
	value := func(_ int, k string) (string, bool, error) {
		if _, ok := v.raw[k]; !ok && keep {
			return "", false, nil
		}
		s, err := v.get(k, nil)
		return s, err == nil, err
	}
	wrap := func(i int, err error) error { // i: the index of cmds[0] rendered
		var pe *contract.ShellPartError
		if errors.As(err, &pe) {
			i, err = i+pe.Part, pe.Err
		}
		if at != nil {
			i = at[i]
		}
		return fmt.Errorf("%s: %s[%d]: %w", v.file, key, i, err)
	}
	if script {
		out, err := contract.RenderShell(cmds, value)
		if err != nil {
			return nil, wrap(0, err)
		}
		return out, nil
	}
	out := make([]string, 0, len(cmds))
	for i, c := range cmds {
		one, err := contract.RenderShell([]string{c}, value)
		if err != nil {
			return nil, wrap(i, err)
		}
		out = append(out, one[0])
	}
	return out, nil
}

// renderPreExec renders the recipe's pre_exec: its run commands, which
// the node joins into one script in the container's entrypoint, as one
// shell text; its copies as they are.
func renderPreExec(r *contract.Recipe, v *vars) ([]contract.PreExec, error) {
	var runs []string
	var at []int
	for i, p := range r.PreExec {
		if p.Run != "" {
			runs, at = append(runs, p.Run), append(at, i)
		}
	}
	out, err := v.renderShell("pre_exec", runs, at, true, false)
	if err != nil {
		return nil, err
	}
	var pre []contract.PreExec
	for i, p := range r.PreExec {
		run := p.Run
		if k := slices.Index(at, i); k >= 0 {
			run = out[k]
		}
		pre = append(pre, contract.PreExec{Run: run, Copy: p.Copy, Dest: p.Dest})
	}
	return pre, nil
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

// nodeWorld is what rank's command and env are built around: its image
// and the world-shape values the placeholders give, each checked.
type nodeWorld struct {
	image            contract.ImageRef
	tp, distPort, ep int
}

// renderNode renders what rank runs on nodes[rank]: its world, argv, env,
// mounts, container shape and pre_exec, in that order (the first error
// found is the one reported).
func renderNode(cfg *config.Config, r *contract.Recipe, v *vars, nodes []*config.Node, rank, dp int) (*contract.NodePlan, error) {
	n, nnodes, head := nodes[rank], len(nodes), headAddr(nodes[0])
	w, err := renderWorld(r, v, nnodes)
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
		argv = appendVLLMDataParallel(argv, nodes, rank, w.distPort, dp, v)
	} else if nnodes > 1 {
		argv = appendWorldFlags(r.Runtime, argv, head, w.distPort, nnodes, rank)
	}
	env, hfMount, err := renderEnv(cfg, r, v, n, nnodes, &w)
	if err != nil {
		return nil, err
	}
	mounts, err := renderMounts(cfg, r, v, n, env, rank, w.tp, hfMount)
	if err != nil {
		return nil, err
	}
	spec, err := containerSpec(r, n)
	if err != nil {
		return nil, err
	}
	pre, err := renderPreExec(r, v)
	if err != nil {
		return nil, err
	}

	// World shape last: engine adapters read these, so they are never left
	// to whatever the image defaults to.
	env["NODE_RANK"] = strconv.Itoa(rank)
	env["NNODES"] = strconv.Itoa(nnodes)
	env["TP_SIZE"] = strconv.Itoa(w.tp)
	env["EP_SIZE"] = strconv.Itoa(w.ep)
	env["MASTER_ADDR"] = head
	env["MASTER_PORT"] = strconv.Itoa(w.distPort)

	return &contract.NodePlan{
		Node:          n.Name,
		Rank:          rank,
		Head:          rank == 0,
		ContainerName: contract.ContainerName(r.Name, rank),
		Image:         w.image,
		Command:       contract.JoinArgs(argv),
		Argv:          argv,
		Env:           env,
		EnvFrom:       copyStrings(r.EnvFrom),
		Mounts:        mounts,
		GPUs:          r.Runtime != "sim",
		Container:     spec,
		PreExec:       pre,
		RowsFrom:      rowsFrom(r, rank, w.tp),
		Topology:      clusterTopology(cfg, r),
	}, nil
}

// renderWorld renders the image and reads the world-shape placeholders,
// refusing a tensor_parallel that does not fit the nnodes nodes.
func renderWorld(r *contract.Recipe, v *vars, nnodes int) (nodeWorld, error) {
	var w nodeWorld
	image, err := v.render("image", r.Image)
	if err != nil {
		return w, err
	}
	if strings.TrimSpace(image) == "" {
		return w, recipeErr(r, "image", "missing: pin the container image the lane runs")
	}
	// Parsed once, here: the plan carries it typed from now on.
	if w.image, err = contract.ParseImageRef(image); err != nil {
		return w, recipeErr(r, "image", "%v", err)
	}
	if w.tp, err = v.intValue("tensor_parallel"); err != nil {
		return w, err
	}
	if w.tp < 1 || w.tp > nnodes {
		return w, recipeErr(r, v.where["tensor_parallel"], "tensor_parallel %d does not fit cluster %s of %d nodes (one GPU each)", w.tp, r.Cluster, nnodes)
	}
	if w.distPort, err = v.intValue("dist_port"); err != nil {
		return w, err
	}
	if _, err := v.intValue("port"); err != nil {
		return w, err
	}
	if w.ep, err = v.intValue("expert_parallel"); err != nil {
		return w, err
	}
	return w, nil
}

// renderEnv is node n's env before mounts and world shape: its
// communication env and, for a sparkrun recipe, sparkrun's cluster env
// and (when it stages nothing) the HF cache offline env with the cache's
// bind (returned); the recipe's env wins over all of them. An [env]
// EP_SIZE sets the expert parallel size unless [defaults] does.
func renderEnv(cfg *config.Config, r *contract.Recipe, v *vars, n *config.Node, nnodes int, w *nodeWorld) (map[string]string, *contract.Mount, error) {
	env := topologyEnv(clusterTopology(cfg, r), n)
	if r.Format == "sparkrun" && nnodes > 1 {
		for k, val := range sparkrunClusterEnv[r.Runtime] {
			env[k] = val
		}
	}
	var hfMount *contract.Mount
	if r.Format == "sparkrun" && len(r.Staging) == 0 && cfg.HFCacheDir != "" {
		env["HF_HOME"] = SparkrunHFHome
		env["HF_HUB_OFFLINE"] = "1"
		env["TRANSFORMERS_OFFLINE"] = "1"
		m := contract.Mount{Src: filepath.Clean(cfg.HFCacheDir), Dst: SparkrunHFHome + "/hub", ReadOnly: true}
		if checkMountSource(cfg, n, m.Src, true) != nil {
			m.Host = true // the operator's hf_cache_dir, not a recipe's choice
		}
		hfMount = &m
	}
	for _, k := range sortedStrings(r.Env) {
		val, err := v.render("env."+k, r.Env[k])
		if err != nil {
			return nil, nil, err
		}
		env[k] = val
	}
	if _, ok := r.Defaults["expert_parallel"]; !ok {
		if e, ok := env["EP_SIZE"]; ok {
			if n, err := strconv.Atoi(strings.TrimSpace(e)); err == nil {
				w.ep = n
			} else {
				return nil, nil, recipeErr(r, "env.EP_SIZE", "%q is not an integer", e)
			}
		}
	}
	return env, hfMount, nil
}

// rowsFrom lists the sparse-rows blocks whose rows_env the serve step fills
// from the staged data on the node of rank (ranks beyond the TP group hold
// the split of their rank modulo tp, as staging tiles them).
func rowsFrom(r *contract.Recipe, rank, tp int) []contract.RowsFrom {
	var out []contract.RowsFrom
	for _, s := range r.Staging {
		if s.Kind != "sparse-rows" || s.RowsEnv == "" || tp < 1 {
			continue
		}
		out = append(out, contract.RowsFrom{Env: s.RowsEnv, Dst: s.Dst, Format: s.Format, Layers: append([]int(nil), s.Layers...), Rows: s.Rows, Rank: rank % tp, TP: tp})
	}
	return out
}

// sparkrunClusterEnv is what sparkrun's runtime plugins add on a
// multi-node launch (their get_cluster_env), under the recipe's env.
var sparkrunClusterEnv = map[string]map[string]string{
	"vllm":   {"NCCL_CUMEM_ENABLE": "0", "OMP_NUM_THREADS": "4"},
	"sglang": {"NCCL_CUMEM_ENABLE": "0", "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": "0"},
}

// worldInt is an integer world-shape key from -o or [defaults]; ok=false
// when unset or not an integer (a placeholder: left to rendering).
func worldInt(r *contract.Recipe, overrides map[string]string, key string) (int, bool) {
	s, ok := overrides[key]
	if !ok {
		v, ok := r.Defaults[key]
		if !ok {
			return 0, false
		}
		s = config.ValueString(v)
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	return n, err == nil
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
func appendVLLMDataParallel(argv []string, nodes []*config.Node, rank, port, dp int, v *vars) []string {
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

// renderArgv splits the command template into shell words first and only
// then fills each word's placeholders, so a value is always one argument:
// a model path with a space stays one word, and -o port="1 --evil" is the
// single (bad) argument "1 --evil", never an extra flag. A word that is
// nothing but one placeholder and renders empty is dropped, as an unquoted
// empty variable is in sh: {extra_args} = "" leaves no "" argument behind.
func renderArgv(r *contract.Recipe, v *vars) ([]string, error) {
	words, err := contract.SplitArgs(r.Command)
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
				words, err := contract.SplitArgs(out)
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
	m := config.Placeholder.FindStringIndex(w)
	return m != nil && m[0] == 0 && m[1] == len(w)
}

// copyStrings copies m (nil for an empty one), so a plan never aliases
// its recipe's maps.
func copyStrings(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
