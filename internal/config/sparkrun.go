package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/strictdecode"
)

// sparkrunFile is the sparkrun v2 recipe shape: exactly the top-level keys
// sparkrun reads (its recipe loader's known keys, plus build_args, which
// its builders read), so a typo is an error, not a silently ignored key;
// plus cluster, which sparklane lets a file pin. Each key is applied
// (parseSparkrun) or reported by name in the recipe's load warnings.
type sparkrunFile struct {
	SparkrunVersion    any               `mapstructure:"sparkrun_version"`
	RecipeVersion      any               `mapstructure:"recipe_version"`
	Name               string            `mapstructure:"name"`
	Description        string            `mapstructure:"description"`
	Model              string            `mapstructure:"model"`
	ModelRevision      string            `mapstructure:"model_revision"`
	Runtime            string            `mapstructure:"runtime"`
	RuntimeVersion     any               `mapstructure:"runtime_version"`
	Mode               string            `mapstructure:"mode"`
	MinNodes           int               `mapstructure:"min_nodes"`
	MaxNodes           int               `mapstructure:"max_nodes"`
	Container          string            `mapstructure:"container"`
	Defaults           map[string]any    `mapstructure:"defaults"`
	Env                map[string]string `mapstructure:"env"`
	Command            string            `mapstructure:"command"`
	RuntimeConfig      map[string]any    `mapstructure:"runtime_config"`
	ClusterOnly        bool              `mapstructure:"cluster_only"`
	SoloOnly           bool              `mapstructure:"solo_only"`
	Benchmark          any               `mapstructure:"benchmark"`
	Metadata           map[string]any    `mapstructure:"metadata"`
	PreExec            []any             `mapstructure:"pre_exec"`
	PostExec           []string          `mapstructure:"post_exec"`
	PostCommands       []string          `mapstructure:"post_commands"`
	Mods               []string          `mapstructure:"mods"`
	StopAfterPost      bool              `mapstructure:"stop_after_post"`
	Builder            string            `mapstructure:"builder"`
	BuilderConfig      map[string]any    `mapstructure:"builder_config"`
	BuildArgs          any               `mapstructure:"build_args"`
	ExecutorConfig     map[string]any    `mapstructure:"executor_config"`
	DistributionConfig any               `mapstructure:"distribution_config"`
	Cluster            string            `mapstructure:"cluster"`
}

// ModsContainerDir is where sparkrun copies a mod into the container
// before running its run.sh (mods/NAME under it).
const ModsContainerDir = "/workspace/mods"

var (
	sglangCmdRE = regexp.MustCompile(`^(?:sglang\s+serve|python3?\s+-m\s+sglang\.launch_server)\b`)
	vllmCmdRE   = regexp.MustCompile(`^vllm\s+serve\b`)
	rayRE       = regexp.MustCompile(`--distributed-executor-backend\s+ray\b`)
	envVarRE    = regexp.MustCompile(`\$(\w+|\{[^}]*\})`)
	secretRE    = regexp.MustCompile(`(?i)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL)`)
)

func parseSparkrun(path string, data []byte, registries map[string]string) (*Recipe, error) {
	bad := func(err error) (*Recipe, error) { return nil, fault.Permanent(fault.InvalidSpec, err) }
	doc, err := strictdecode.ParseYAML(path, data)
	if err != nil {
		return bad(err)
	}
	tree, ok := doc.(map[string]any)
	if !ok {
		return bad(fmt.Errorf("%s: the document is %s, not a table of keys: a sparkrun recipe starts with recipe_version, model, runtime, container", path, strictdecode.Describe(doc)))
	}
	if !hasAny(tree, "recipe_version", "sparkrun_version", "model", "runtime", "container", "command") {
		return bad(fmt.Errorf("%s: %w: none of sparkrun's keys (recipe_version, model, runtime, container, command)", path, ErrNotRecipe))
	}
	var f sparkrunFile
	keyErrs, valueErrs := strictdecode.Decode(path, tree, &f)
	errs := append(keyErrs, valueErrs...)
	version, _ := strictdecode.ScalarString(f.RecipeVersion)
	if f.RecipeVersion == nil {
		version, _ = strictdecode.ScalarString(f.SparkrunVersion)
	}
	if version != "" && version != "2" {
		errs = append(errs, fmt.Errorf("%s: recipe_version: %q is not supported: sparklane reads sparkrun v2 recipes (recipe_version: \"2\")", path, version))
	}
	r := &Recipe{
		File: path, Format: "sparkrun", Name: baseName(path),
		Cluster: f.Cluster, Image: f.Container, Model: f.Model, ModelRevision: f.ModelRevision,
		MinNodes: f.MinNodes, MaxNodes: f.MaxNodes, RecipeVersion: version, Mode: f.Mode,
		Metadata: f.Metadata, Mods: f.Mods,
		Command: f.Command, Defaults: f.Defaults,
		PostExec: f.PostExec, PostCommands: f.PostCommands, StopAfterPost: f.StopAfterPost,
		RuntimeConfig: f.RuntimeConfig, BuildArgs: f.BuildArgs,
		Builder: f.Builder, BuilderConfig: f.BuilderConfig,
	}
	warn := func(key, why string, args ...any) {
		r.LoadWarnings = append(r.LoadWarnings, fmt.Sprintf("%s: %s: %s", path, key, fmt.Sprintf(why, args...)))
	}
	rt, err := sparkrunRuntime(f.Runtime, f.Command, f.Defaults)
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: runtime: %v", path, err))
	}
	r.Runtime = rt

	// Topology, as sparkrun reads it.
	switch f.Mode {
	case "", "auto":
		switch {
		case r.MinNodes > 1:
			r.Mode = "cluster"
		case r.MaxNodes == 1:
			r.Mode = "solo"
		}
	case "solo":
		r.MinNodes, r.MaxNodes = 1, 1
	case "cluster":
	default:
		errs = append(errs, fmt.Errorf("%s: mode: %q: use solo, cluster or auto", path, f.Mode))
	}
	if f.ClusterOnly {
		r.MinNodes = max(r.MinNodes, 2)
		r.Mode = "cluster"
	}
	if f.SoloOnly {
		r.MaxNodes = 1
		r.Mode = "solo"
	}
	if r.Mode == "cluster" && r.MinNodes < 2 {
		r.MinNodes = 2
	}

	if f.Description != "" {
		if r.Metadata == nil {
			r.Metadata = map[string]any{}
		}
		if _, ok := r.Metadata["description"]; !ok {
			r.Metadata["description"] = f.Description
		}
	}
	// env: $VAR expanded as sparkrun does (os.path.expandvars: an unset
	// variable stays as written), except secrets, which never enter a plan.
	if f.Env != nil {
		r.Env = map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(f.Env)) {
			r.Env[k] = expandEnv(f.Env[k], func(name string) {
				warn("env."+k, "$%s is not expanded: it names a secret, and secrets never enter plans or workflow history; set it in the image or pass it with api_key_env", name)
			})
		}
	}
	pre, perrs := sparkrunPreExec(path, f.PreExec)
	r.PreExec, errs = pre, append(errs, perrs...)
	if f.ExecutorConfig != nil {
		ex, xerrs := decodeExecutor(path, f.ExecutorConfig)
		errs = append(errs, xerrs...)
		r.Executor = ex
		if ex.User == "$SHELL_USER" {
			warn("executor_config.user", "$SHELL_USER (the SSH user) is not known when rendering: give the uid:gid, e.g. user: \"1000:1000\"")
		}
		if ex.AutoRemove != nil && *ex.AutoRemove {
			warn("executor_config.auto_remove", "not applied: sparklane keeps a stopped rank's container until the next serve, so its logs can be read")
		}
	}
	mods, merrs := resolveMods(path, f.Mods, registries)
	errs = append(errs, merrs...)
	r.PreExec = append(r.PreExec, modPreExec(mods)...)

	r.Probe.ModelType = pooledModelType(f.Model, f.Command)

	warnUnapplied(&f, r.Name, warn)
	if len(errs) > 0 {
		return bad(errors.Join(errs...))
	}
	applyRecipeDefaults(r)
	return r, nil
}

// sparkrunPreExec reads pre_exec: shell strings or {copy, dest} tables
// (with an optional source_host).
func sparkrunPreExec(path string, items []any) ([]PreExec, []error) {
	var pre []PreExec
	var errs []error
	for i, e := range items {
		switch x := e.(type) {
		case string:
			pre = append(pre, PreExec{Run: x})
		case map[string]any:
			src, _ := x["copy"].(string)
			dst, _ := x["dest"].(string)
			if src == "" || dst == "" || len(x) > 3 {
				errs = append(errs, fmt.Errorf("%s: pre_exec[%d]: a table entry is {copy: SRC, dest: DST}", path, i))
				continue
			}
			if _, ok := x["source_host"]; len(x) == 3 && !ok {
				errs = append(errs, fmt.Errorf("%s: pre_exec[%d]: a table entry is {copy: SRC, dest: DST}", path, i))
				continue
			}
			pre = append(pre, PreExec{Copy: src, Dest: dst})
		default:
			errs = append(errs, fmt.Errorf("%s: pre_exec[%d]: %s: write a shell command or {copy: SRC, dest: DST}", path, i, strictdecode.Describe(e)))
		}
	}
	return pre, errs
}

// warnUnapplied says, by name, which sparkrun keys of f are recorded but
// not applied (name is the lane's name, taken from the file).
func warnUnapplied(f *sparkrunFile, name string, warn func(key, why string, args ...any)) {
	// Keys recorded but not applied: say so, by name.
	if f.Name != "" && f.Name != name {
		warn("name", "%q not used: sparkrun and sparklane name a recipe by its file (%s)", f.Name, name)
	}
	if f.RuntimeVersion != nil {
		warn("runtime_version", "not applied: the container image decides the engine version")
	}
	if f.RuntimeConfig != nil {
		warn("runtime_config", "recorded, not applied: its keys (%s) are read by sparkrun's runtime plugins; put flags in command or defaults", strings.Join(slices.Sorted(maps.Keys(f.RuntimeConfig)), ", "))
	}
	if f.Benchmark != nil {
		warn("benchmark", "not applied: sparklane benches with its own [bench] settings")
	}
	if f.DistributionConfig != nil {
		warn("distribution_config", "not applied: sparklane moves weights with [[staging]]; without it the lane reads hf_cache_dir")
	}
}

// pooledModelType reads a sparkrun recipe's model type from its command:
// vLLM's --runner pooling (or --task embed/score/classify) serves
// embeddings, or scores for a reranker (the model's name says which).
func pooledModelType(model, command string) string {
	words, err := contract.SplitArgs(command)
	if err != nil {
		return contract.ModelChat
	}
	pooled := false
	for i, w := range words {
		next := ""
		if i+1 < len(words) {
			next = words[i+1]
		}
		switch {
		case (w == "--runner" && next == "pooling") || w == "--runner=pooling",
			(w == "--task" && (next == "embed" || next == "score")), w == "--task=embed", w == "--task=score",
			w == "--is-embedding":
			pooled = true
		}
	}
	if !pooled {
		return contract.ModelChat
	}
	if strings.Contains(strings.ToLower(model), "rerank") {
		return contract.ModelReranker
	}
	return contract.ModelEmbedding
}

// sparkrunRuntime maps sparkrun's runtime names onto sparklane's: vllm,
// vllm-distributed → vllm (native multi-node); an empty runtime is read
// from the command as sparkrun does. Ray-backed vLLM is refused.
func sparkrunRuntime(rt, command string, defaults map[string]any) (string, error) {
	cmd := strings.TrimSpace(command)
	if rt == "" && cmd == "" {
		return "", nil // validation says runtime is missing
	}
	if rt == "" {
		switch {
		case sglangCmdRE.MatchString(cmd):
			rt = "sglang"
		case vllmCmdRE.MatchString(cmd):
			rt = "vllm"
		default:
			return "", fmt.Errorf("empty and the command starts with neither `vllm serve` nor `sglang serve`: set runtime (vllm or sglang)")
		}
	}
	switch rt {
	case "vllm", "vllm-distributed":
		if b, _ := strictdecode.ScalarString(defaults["distributed_executor_backend"]); strings.EqualFold(b, "ray") || rayRE.MatchString(cmd) {
			return "", fmt.Errorf("%s with the Ray executor backend: sparklane runs vLLM's native multi-node mode; drop distributed_executor_backend: ray", rt)
		}
		return "vllm", nil
	case "vllm-ray":
		return "", fmt.Errorf("vllm-ray: sparklane runs vLLM's native multi-node mode; use runtime: vllm")
	}
	return rt, nil
}

// expandEnv expands $NAME and ${NAME} from the environment like Python's
// os.path.expandvars (what sparkrun uses): unset variables stay as
// written. A variable whose name looks like a secret is never expanded
// (secret is called with its name).
func expandEnv(s string, secret func(name string)) string {
	return envVarRE.ReplaceAllStringFunc(s, func(m string) string {
		name := strings.TrimPrefix(m, "$")
		name = strings.TrimSuffix(strings.TrimPrefix(name, "{"), "}")
		val, ok := os.LookupEnv(name)
		if !ok {
			return m
		}
		if secretRE.MatchString(name) {
			secret(name)
			return m
		}
		return val
	})
}

// decodeExecutor reads executor_config as sparkrun does: list keys take a
// single string too. Unknown keys are errors naming the key.
func decodeExecutor(path string, m map[string]any) (Executor, []error) {
	for _, k := range []string{"security_opt", "cap_add", "ulimit", "devices", "labels"} {
		if s, ok := m[k].(string); ok {
			m[k] = []any{s}
		}
	}
	var ex Executor
	keyErrs, valueErrs := strictdecode.Decode(path, m, &ex)
	return ex, append(prefixErrs(keyErrs, "executor_config."), valueErrs...)
}

// prefixErrs puts the table path in front of key errors of a sub-table
// ("FILE: unknown key X" → "FILE: unknown key executor_config.X").
func prefixErrs(errs []error, prefix string) []error {
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = errors.New(strings.Replace(e.Error(), "unknown key ", "unknown key "+prefix, 1))
	}
	return out
}

// modPreExec is what sparkrun appends to pre_exec for each resolved mod:
// copy its directory to /workspace/mods/NAME, then run its run.sh there
// with WORKSPACE_DIR set to the container's working directory.
func modPreExec(mods []string) []PreExec {
	var out []PreExec
	for _, m := range mods {
		dest := ModsContainerDir + "/" + filepath.Base(m)
		out = append(out, PreExec{Copy: m, Dest: dest},
			PreExec{Run: "export WORKSPACE_DIR=$PWD && cd " + dest + " && chmod +x run.sh && ./run.sh"})
	}
	return out
}

// resolveMods finds each mod (a directory with a run.sh) as sparkrun does
// on the control machine: REF or mods/REF next to the recipe, then a
// *-mods or mods directory of the recipe's registry clone (any directory
// above the recipe, up to four levels). A mod that is not found is an
// error naming it and the places tried: a recipe without its mods would
// serve with the wrong chat template or kernels.
func resolveMods(path string, refs []string, registries map[string]string) ([]string, []error) {
	var out []string
	var errs []error
	base := filepath.Dir(path)
	if abs, err := filepath.Abs(base); err == nil {
		base = abs
	}
	for i, ref := range refs {
		// sparkrun's order (core/mods.py): @REGISTRY/REL names the
		// registry; else next to the recipe, then the recipe's own
		// registry, then the registry named eugr.
		var cands []string
		rel := strings.TrimPrefix(ref, "mods/")
		if reg, r, scoped := strings.Cut(strings.TrimPrefix(ref, "@"), "/"); strings.HasPrefix(ref, "@") {
			root, ok := registries[reg]
			if !scoped || !ok {
				errs = append(errs, fmt.Errorf("%s: mods[%d]: %q: no registry %q (known: %s): `starter registry add %s URL`, or write the mod's name", path, i, ref, reg, strings.Join(slices.Sorted(maps.Keys(registries)), ", "), reg))
				continue
			}
			rel, cands = r, registryMods(root, r)
		}
		if rel == "" || hasDotDot(rel) || filepath.IsAbs(rel) {
			errs = append(errs, fmt.Errorf("%s: mods[%d]: %q is not a mod name: write NAME, mods/NAME or @REGISTRY/NAME", path, i, ref))
			continue
		}
		if !strings.HasPrefix(ref, "@") {
			cands = append(cands, filepath.Join(base, rel), filepath.Join(base, "mods", rel))
			dir := base
			for range 4 {
				parent := filepath.Dir(dir)
				if parent == dir {
					break
				}
				dir = parent
				cands = append(cands, filepath.Join(dir, "mods", rel))
				if ms, _ := filepath.Glob(filepath.Join(dir, "*-mods")); len(ms) > 0 {
					for _, m := range ms {
						cands = append(cands, filepath.Join(m, rel))
					}
				}
			}
			for _, name := range slices.Sorted(maps.Keys(registries)) {
				if root := registries[name]; within(base, root) {
					cands = append(cands, registryMods(root, rel)...)
				}
			}
			if root, ok := registries["eugr"]; ok {
				cands = append(cands, registryMods(root, rel)...)
			}
		}
		var tried []string
		found := ""
		for _, c := range cands {
			tried = append(tried, c)
			if st, err := os.Stat(filepath.Join(c, "run.sh")); err == nil && st.Mode().IsRegular() {
				found = c
				break
			}
		}
		if found == "" {
			errs = append(errs, fmt.Errorf("%s: mods[%d]: mod %q not found (a directory with run.sh; tried %s): add the registry that has it (`starter registry add eugr URL` is the fallback sparkrun uses), write @REGISTRY/%s, or remove the mod", path, i, ref, strings.Join(tried, ", "), rel))
			continue
		}
		abs, err := filepath.Abs(found)
		if err != nil {
			abs = found
		}
		out = append(out, abs)
	}
	return out, errs
}

// registryMods are where a registry clone may hold mod rel: ROOT/REL,
// ROOT/mods/REL, ROOT/*-mods/REL.
func registryMods(root, rel string) []string {
	out := []string{filepath.Join(root, rel), filepath.Join(root, "mods", rel)}
	ms, _ := filepath.Glob(filepath.Join(root, "*-mods"))
	for _, m := range ms {
		out = append(out, filepath.Join(m, rel))
	}
	return out
}

// within says whether path lies in (or is) dir.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}
