package sim

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sparklane/sparklane/internal/engine/memfit"
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
	p := &argParser{c: Config{Port: DefaultPort}, set: map[string]bool{}, getenv: getenv}
	positional, err := p.flags(args)
	if err != nil {
		return p.c, err
	}
	for _, step := range []func() error{
		func() error { return p.positional(positional) },
		p.distInit,
		p.logLines,
		p.pacingEnv,
		p.engramEnv,
	} {
		if err := step(); err != nil {
			return p.c, err
		}
	}
	p.c.HFHubCache = getenv("HF_HUB_CACHE")
	if p.c.HFHubCache == "" {
		if h := getenv("HF_HOME"); h != "" {
			p.c.HFHubCache = filepath.Join(h, "hub")
		}
	}
	return p.c, nil
}

// argParser is one ParseArgs call: the Config it fills, the flags that
// only steer the parse, and which flags were given (they win over env).
type argParser struct {
	c                      Config
	masterAddr, masterPort string
	engramEnvName          string
	engramDirFlag          string
	set                    map[string]bool
	getenv                 func(string) string
}

// flagSpec is how one known flag takes its value.
type flagSpec struct {
	kind flagKind
	set  func(string) error
}

// specs are the flags ParseArgs knows, by their dashed name.
func (p *argParser) specs() map[string]flagSpec {
	c := &p.c
	return map[string]flagSpec{
		"model-path":           {kString, setString(&c.ModelPath)},
		"model":                {kString, setString(&c.ModelPath)},
		"port":                 {kInt, setInt("port", &c.Port)},
		"host":                 {kString, setString(&c.Host)},
		"tp":                   {kInt, setInt("tp", &c.TP)},
		"tp-size":              {kInt, setInt("tp-size", &c.TP)},
		"tensor-parallel-size": {kInt, setInt("tensor-parallel-size", &c.TP)},
		"nnodes":               {kInt, setInt("nnodes", &c.NNodes)},
		"node-rank":            {kInt, setInt("node-rank", &c.NodeRank)},
		"dist-init-addr":       {kString, setString(&c.DistInitAddr)},
		"master-addr":          {kString, setString(&p.masterAddr)},
		"master-port":          {kString, setString(&p.masterPort)},
		"headless":             {kBool, setBool("headless", &c.Headless)},
		"context-length":       {kInt, setInt("context-length", &c.ContextLength)},
		"max-model-len":        {kInt, setMaxModelLen(&c.ContextLength)},
		"served-model-name":    {kString, setString(&c.ServedModelName)},
		"load-mibps":           {kFloat, setFloat("load-mibps", &c.LoadMiBps)},
		"prefill-tps":          {kFloat, setFloat("prefill-tps", &c.PrefillTPS)},
		"decode-tps":           {kFloat, setFloat("decode-tps", &c.DecodeTPS)},
		"jitter-pct":           {kFloat, setFloat("jitter-pct", &c.JitterPct)},
		"seed":                 {kInt, setInt64("seed", &c.Seed)},
		"fail-at":              {kString, setString(&c.FailAt)},
		"nofollow":             {kBool, setBool("nofollow", &c.NoFollow)},
		"engram-dir":           {kString, setString(&p.engramDirFlag)},
		"engram-env":           {kString, setString(&p.engramEnvName)},
		"api-key":              {kString, setString(&c.APIKey)},
	}
}

func setString(p *string) func(string) error { return func(v string) error { *p = v; return nil } }

func setInt(name string, p *int) func(string) error {
	return func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("--%s %q: not an integer", name, v)
		}
		*p = n
		return nil
	}
}

// setMaxModelLen reads --max-model-len as vLLM does (32k = 32000, 32K =
// 32768, auto: the default length), by the rule the memory fit reads the
// same flag with.
func setMaxModelLen(p *int) func(string) error {
	return func(v string) error {
		n, err := memfit.ParseMaxModelLen(v)
		if err != nil {
			return fmt.Errorf("--max-model-len %q: %v", v, err)
		}
		*p = int(max(n, 0)) // auto (-1): the default
		return nil
	}
}

func setInt64(name string, p *int64) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("--%s %q: not an integer", name, v)
		}
		*p = n
		return nil
	}
}

func setFloat(name string, p *float64) func(string) error {
	return func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("--%s %q: not a number", name, v)
		}
		*p = f
		return nil
	}
}

func setBool(name string, p *bool) func(string) error {
	return func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("--%s=%q: not a boolean", name, v)
		}
		*p = b
		return nil
	}
}

// flags reads the command line's flags into the Config and returns the
// positional arguments.
func (p *argParser) flags(args []string) ([]string, error) {
	specs := p.specs()
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
			i = p.ignore(args, i, name, val, hasVal)
			continue
		}
		if sp.kind == kBool {
			if !hasVal {
				val = "true"
			}
		} else if !hasVal {
			if i+1 >= len(args) {
				return positional, fmt.Errorf("--%s needs a value", name)
			}
			val = args[i+1]
			i++
		}
		if err := sp.set(val); err != nil {
			return positional, err
		}
		p.set[name] = true
	}
	return positional, nil
}

// ignore lists an unknown engine flag at args[i] in Config.Ignored,
// taking its value when one follows unless it is a switch by its
// spelling, and returns the index of the last argument it took.
func (p *argParser) ignore(args []string, i int, name, val string, hasVal bool) int {
	if !hasVal && !isSwitch(name) && i+1 < len(args) && (!strings.HasPrefix(args[i+1], "-") || isNumber(args[i+1])) {
		val, hasVal = args[i+1], true
		i++
	}
	if hasVal {
		p.c.Ignored = append(p.c.Ignored, "--"+name+" "+val)
	} else {
		p.c.Ignored = append(p.c.Ignored, "--"+name)
	}
	return i
}

// positional takes the model path from the positional arguments; the
// rest are ignored.
func (p *argParser) positional(positional []string) error {
	// vLLM spells the model as `vllm serve MODEL`; accept a leading
	// "serve", and the binary's own name when a command line that starts
	// with /engine-sim is passed as the arguments of the image entrypoint.
	for len(positional) > 0 && (positional[0] == "serve" || filepath.Base(positional[0]) == "engine-sim") {
		positional = positional[1:]
	}
	if len(positional) == 0 {
		return nil
	}
	if p.c.ModelPath != "" && p.c.ModelPath != positional[0] {
		return fmt.Errorf("model path given twice: %q and --model-path %q", positional[0], p.c.ModelPath)
	}
	p.c.ModelPath = positional[0]
	p.c.Ignored = append(p.c.Ignored, positional[1:]...)
	return nil
}

// distInit spells vLLM's --master-addr/--master-port as DistInitAddr
// when --dist-init-addr was not given.
func (p *argParser) distInit() error {
	if p.c.DistInitAddr != "" || (p.masterAddr == "" && p.masterPort == "") {
		return nil
	}
	if p.masterAddr == "" || p.masterPort == "" {
		return fmt.Errorf("--master-addr %q and --master-port %q must be given together", p.masterAddr, p.masterPort)
	}
	p.c.DistInitAddr = net.JoinHostPort(p.masterAddr, p.masterPort)
	return nil
}

// logLines reads what every rank prints (boot lines, env lines) and the
// API key from the environment.
func (p *argParser) logLines() error {
	if v := p.getenv(EnvBootLines); v != "" {
		for _, l := range strings.Split(v, "\n") {
			if l = strings.TrimRight(l, "\r"); strings.TrimSpace(l) != "" {
				p.c.BootLines = append(p.c.BootLines, l)
			}
		}
	}
	for _, name := range strings.Split(p.getenv(EnvLogEnv), ",") {
		if name = strings.TrimSpace(name); name != "" {
			p.c.LogEnv = append(p.c.LogEnv, name+"="+p.getenv(name))
		}
	}
	if p.c.APIKey == "" {
		p.c.APIKey = p.getenv(EnvAPIKey)
	}
	return nil
}

// pacingEnv reads the env knobs whose flag was not given.
func (p *argParser) pacingEnv() error {
	for _, k := range []struct {
		flag, env string
		p         *float64
	}{
		{"load-mibps", EnvLoadMiBps, &p.c.LoadMiBps},
		{"prefill-tps", EnvPrefillTPS, &p.c.PrefillTPS},
		{"decode-tps", EnvDecodeTPS, &p.c.DecodeTPS},
		{"jitter-pct", EnvJitterPct, &p.c.JitterPct},
	} {
		if p.set[k.flag] {
			continue
		}
		if v := p.getenv(k.env); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("env %s=%q: not a number", k.env, v)
			}
			*k.p = f
		}
	}
	if !p.set["fail-at"] {
		p.c.FailAt = p.getenv(EnvFailAt)
	}
	if !p.set["nofollow"] {
		if v := p.getenv(EnvNoFollow); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("env %s=%q: not a boolean", EnvNoFollow, v)
			}
			p.c.NoFollow = b
		}
	}
	return nil
}

// engramEnv finds the engram dir (flag, else the named or default env
// vars in order) and reads the engram row counts and record size.
func (p *argParser) engramEnv() error {
	p.c.EngramDir = p.engramDirFlag
	if p.c.EngramDir == "" {
		envs := DefaultEngramEnvs
		if p.engramEnvName != "" {
			envs = []string{p.engramEnvName}
		}
		for _, name := range envs {
			if v := p.getenv(name); v != "" {
				p.c.EngramDir = v
				break
			}
		}
	}
	if v := p.getenv(EnvEngramRows); v != "" {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil || n < 1 {
				return fmt.Errorf("env %s=%q: want a positive row count, or a comma list of them per layer", EnvEngramRows, v)
			}
			p.c.EngramRows = append(p.c.EngramRows, n)
		}
	}
	if v := p.getenv(EnvEngramRecordBytes); v != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("env %s=%q: want a positive record size in bytes", EnvEngramRecordBytes, v)
		}
		p.c.EngramRecordBytes = n
	}
	return nil
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
