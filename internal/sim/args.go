package sim

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
)

// Env names of the simulation knobs, so recipes can set them without
// changing the engine command line. Flags win over env.
const (
	EnvLoadMiBps  = "ENGINE_SIM_LOAD_MIBPS"
	EnvPrefillTPS = "ENGINE_SIM_PREFILL_TPS"
	EnvDecodeTPS  = "ENGINE_SIM_DECODE_TPS"
	EnvJitterPct  = "ENGINE_SIM_JITTER_PCT"
	EnvFailAt     = "ENGINE_SIM_FAIL_AT"
	EnvNoFollow   = "ENGINE_SIM_NOFOLLOW"
	// EnvEngramRows is the per-layer total row count the runtime
	// cross-checks the engram files against: one number for every layer,
	// or a comma list in layer order.
	EnvEngramRows = "SPARK_ENGRAM_ROWS"
	// EnvEngramRecordBytes is the record size the stand-in runtime reads
	// from packed engram files (a real runtime has it built in: 264 on
	// mia); a file of other records is refused. Unset: the header's size.
	EnvEngramRecordBytes = "ENGINE_SIM_ENGRAM_RECORD_BYTES"
	// EnvBootLines are lines every rank prints once its weights are
	// loaded (newline-separated), standing in for what a production
	// engine prints when its gated features come on; probe
	// log_signatures look for them.
	EnvBootLines = "ENGINE_SIM_BOOT_LINES"
	// EnvLogEnv names variables (comma-separated) every rank prints as
	// NAME=VALUE when it starts, as engines that log their environment or
	// arguments do (a token among them): what log masking is tested on.
	EnvLogEnv = "ENGINE_SIM_LOG_ENV"
	// EnvAPIKey is the key the API requires as a bearer token when no
	// --api-key is given (vLLM reads VLLM_API_KEY the same way).
	EnvAPIKey = "VLLM_API_KEY"
)

// DefaultPort is the API port when --port is not given (vLLM's default).
const DefaultPort = 8000

// DefaultEngramEnvs are the env vars consulted, in order, for the engram
// dir when --engram-env does not name one.
var DefaultEngramEnvs = []string{"SPARK_ENGRAM_DIR", "DSV41_PACKED_DIR"}

type flagKind int

const (
	kString flagKind = iota
	kInt
	kFloat
	kBool
)

// ParseArgs reads an engine-style command line (SGLang and vLLM spellings)
// plus env knobs into a Config. Unknown "--flag value" pairs real engines
// take are accepted and listed in Config.Ignored, so recipes written for
// the real engines run unchanged.
func ParseArgs(args []string, getenv func(string) string) (Config, error) {
	c := Config{Port: DefaultPort}
	var masterAddr, masterPort, engramEnv string
	var engramDirFlag string
	set := map[string]bool{}

	type spec struct {
		kind flagKind
		set  func(string) error
	}
	str := func(p *string) func(string) error { return func(v string) error { *p = v; return nil } }
	num := func(name string, p *int) func(string) error {
		return func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("--%s %q: not an integer", name, v)
			}
			*p = n
			return nil
		}
	}
	num64 := func(name string, p *int64) func(string) error {
		return func(v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("--%s %q: not an integer", name, v)
			}
			*p = n
			return nil
		}
	}
	flt := func(name string, p *float64) func(string) error {
		return func(v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("--%s %q: not a number", name, v)
			}
			*p = f
			return nil
		}
	}
	boolean := func(name string, p *bool) func(string) error {
		return func(v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("--%s=%q: not a boolean", name, v)
			}
			*p = b
			return nil
		}
	}
	specs := map[string]spec{
		"model-path":           {kString, str(&c.ModelPath)},
		"model":                {kString, str(&c.ModelPath)},
		"port":                 {kInt, num("port", &c.Port)},
		"host":                 {kString, str(&c.Host)},
		"tp":                   {kInt, num("tp", &c.TP)},
		"tp-size":              {kInt, num("tp-size", &c.TP)},
		"tensor-parallel-size": {kInt, num("tensor-parallel-size", &c.TP)},
		"nnodes":               {kInt, num("nnodes", &c.NNodes)},
		"node-rank":            {kInt, num("node-rank", &c.NodeRank)},
		"dist-init-addr":       {kString, str(&c.DistInitAddr)},
		"master-addr":          {kString, str(&masterAddr)},
		"master-port":          {kString, str(&masterPort)},
		"headless":             {kBool, boolean("headless", &c.Headless)},
		"context-length":       {kInt, num("context-length", &c.ContextLength)},
		"max-model-len":        {kInt, num("max-model-len", &c.ContextLength)},
		"served-model-name":    {kString, str(&c.ServedModelName)},
		"load-mibps":           {kFloat, flt("load-mibps", &c.LoadMiBps)},
		"prefill-tps":          {kFloat, flt("prefill-tps", &c.PrefillTPS)},
		"decode-tps":           {kFloat, flt("decode-tps", &c.DecodeTPS)},
		"jitter-pct":           {kFloat, flt("jitter-pct", &c.JitterPct)},
		"seed":                 {kInt, num64("seed", &c.Seed)},
		"fail-at":              {kString, str(&c.FailAt)},
		"nofollow":             {kBool, boolean("nofollow", &c.NoFollow)},
		"engram-dir":           {kString, str(&engramDirFlag)},
		"engram-env":           {kString, str(&engramEnv)},
		"api-key":              {kString, str(&c.APIKey)},
	}

	var positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" || isNumber(a) {
			positional = append(positional, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		val, hasVal := "", false
		if k := strings.IndexByte(name, '='); k >= 0 {
			name, val, hasVal = name[:k], name[k+1:], true
		}
		name = strings.ReplaceAll(name, "_", "-")
		sp, known := specs[name]
		if !known {
			// An unknown engine flag: take its value when one follows,
			// unless it is a switch by its spelling.
			if !hasVal && !isSwitch(name) && i+1 < len(args) && (!strings.HasPrefix(args[i+1], "-") || isNumber(args[i+1])) {
				val, hasVal = args[i+1], true
				i++
			}
			if hasVal {
				c.Ignored = append(c.Ignored, "--"+name+" "+val)
			} else {
				c.Ignored = append(c.Ignored, "--"+name)
			}
			continue
		}
		if sp.kind == kBool {
			if !hasVal {
				val = "true"
			}
		} else if !hasVal {
			if i+1 >= len(args) {
				return c, fmt.Errorf("--%s needs a value", name)
			}
			val = args[i+1]
			i++
		}
		if err := sp.set(val); err != nil {
			return c, err
		}
		set[name] = true
	}
	// vLLM spells the model as `vllm serve MODEL`; accept a leading
	// "serve", and the binary's own name when a command line that starts
	// with /engine-sim is passed as the arguments of the image entrypoint.
	for len(positional) > 0 && (positional[0] == "serve" || filepath.Base(positional[0]) == "engine-sim") {
		positional = positional[1:]
	}
	if len(positional) > 0 {
		if c.ModelPath != "" && c.ModelPath != positional[0] {
			return c, fmt.Errorf("model path given twice: %q and --model-path %q", positional[0], c.ModelPath)
		}
		c.ModelPath = positional[0]
		for _, p := range positional[1:] {
			c.Ignored = append(c.Ignored, p)
		}
	}
	if c.DistInitAddr == "" && (masterAddr != "" || masterPort != "") {
		if masterAddr == "" || masterPort == "" {
			return c, fmt.Errorf("--master-addr %q and --master-port %q must be given together", masterAddr, masterPort)
		}
		c.DistInitAddr = net.JoinHostPort(masterAddr, masterPort)
	}

	if v := getenv(EnvBootLines); v != "" {
		for _, l := range strings.Split(v, "\n") {
			if l = strings.TrimRight(l, "\r"); strings.TrimSpace(l) != "" {
				c.BootLines = append(c.BootLines, l)
			}
		}
	}
	for _, name := range strings.Split(getenv(EnvLogEnv), ",") {
		if name = strings.TrimSpace(name); name != "" {
			c.LogEnv = append(c.LogEnv, name+"="+getenv(name))
		}
	}
	if c.APIKey == "" {
		c.APIKey = getenv(EnvAPIKey)
	}
	// Env knobs where no flag was given.
	envFloat := func(flag, env string, p *float64) error {
		if set[flag] {
			return nil
		}
		if v := getenv(env); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("env %s=%q: not a number", env, v)
			}
			*p = f
		}
		return nil
	}
	if err := envFloat("load-mibps", EnvLoadMiBps, &c.LoadMiBps); err != nil {
		return c, err
	}
	if err := envFloat("prefill-tps", EnvPrefillTPS, &c.PrefillTPS); err != nil {
		return c, err
	}
	if err := envFloat("decode-tps", EnvDecodeTPS, &c.DecodeTPS); err != nil {
		return c, err
	}
	if err := envFloat("jitter-pct", EnvJitterPct, &c.JitterPct); err != nil {
		return c, err
	}
	if !set["fail-at"] {
		c.FailAt = getenv(EnvFailAt)
	}
	if !set["nofollow"] {
		if v := getenv(EnvNoFollow); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return c, fmt.Errorf("env %s=%q: not a boolean", EnvNoFollow, v)
			}
			c.NoFollow = b
		}
	}
	c.EngramDir = engramDirFlag
	if c.EngramDir == "" {
		envs := DefaultEngramEnvs
		if engramEnv != "" {
			envs = []string{engramEnv}
		}
		for _, name := range envs {
			if v := getenv(name); v != "" {
				c.EngramDir = v
				break
			}
		}
	}
	if v := getenv(EnvEngramRows); v != "" {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil || n < 1 {
				return c, fmt.Errorf("env %s=%q: want a positive row count, or a comma list of them per layer", EnvEngramRows, v)
			}
			c.EngramRows = append(c.EngramRows, n)
		}
	}
	if v := getenv(EnvEngramRecordBytes); v != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 1 {
			return c, fmt.Errorf("env %s=%q: want a positive record size in bytes", EnvEngramRecordBytes, v)
		}
		c.EngramRecordBytes = n
	}
	c.HFHubCache = getenv("HF_HUB_CACHE")
	if c.HFHubCache == "" {
		if h := getenv("HF_HOME"); h != "" {
			c.HFHubCache = filepath.Join(h, "hub")
		}
	}
	return c, nil
}

// isSwitch says an unknown flag takes no value by its spelling.
func isSwitch(name string) bool {
	for _, p := range []string{"enable-", "disable-", "no-", "use-", "skip-"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	switch name {
	case "trust-remote-code", "enforce-eager", "disable-log-requests", "disable-log-stats", "help", "version":
		return true
	}
	return false
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}
