package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
)

// Fail-at phases make the engine fail on purpose, so tests can exercise
// what the orchestrator does when an engine dies at each phase.
const (
	FailLoad  = "load"
	FailJoin  = "join"
	FailServe = "serve"
)

// Config is everything engine-sim takes from its command line and env.
// Zero values mean the engines' usual defaults (see ParseArgs).
type Config struct {
	// ModelPath is a directory of safetensors shards, a hub cache root, a
	// models--org--name directory, or a model id resolved in HFHubCache.
	ModelPath string
	// ServedModelName is the id /v1/models reports and the model id used to
	// pick a repo from a hub cache.
	ServedModelName string
	// HFHubCache is the hub cache root used when ModelPath is a model id
	// (from HF_HUB_CACHE, else HF_HOME/hub).
	HFHubCache string

	// Host and Port are where rank 0 serves the API. Port 0 picks a free
	// port (reported through OnServing).
	Host string
	Port int
	// Listener, when set, is where rank 0 serves the API instead of
	// Host:Port: a process embedding the engine brings its own (an
	// in-memory network in tests). The engine closes it when it stops.
	Listener net.Listener

	// TP is the tensor parallel size (engram tiling); default NNodes.
	TP int
	// NNodes and NodeRank give the world shape; one rank per node.
	NNodes   int
	NodeRank int
	// DistInitAddr is HOST:PORT of rank 0's rendezvous listener
	// (SGLang --dist-init-addr, vLLM --master-addr/--master-port).
	DistInitAddr string
	// Headless marks a vLLM worker rank (no API); ranks > 0 never serve.
	Headless bool
	// ContextLength is the maximum prompt length in tokens.
	ContextLength int

	// LoadMiBps caps the weight read rate (0 = unlimited), so staged local
	// NVMe versus NAS-like slow reads show up as load time.
	LoadMiBps float64
	// PrefillTPS and DecodeTPS pace the answers.
	PrefillTPS float64
	DecodeTPS  float64
	// JitterPct varies each request's prefill and decode rates by up to
	// ±JitterPct % (uniform), like a real engine's request-to-request
	// noise; 0 paces every request exactly. The draw is a hash of Seed and
	// the prompt, so the same request is paced the same way every time
	// and concurrent requests do not depend on their arrival order.
	JitterPct float64
	// Seed seeds the jitter (vLLM's --seed).
	Seed int64
	// FailAt makes the engine fail on purpose: "load" after reading its
	// first shard, "join" after loading (before reporting to rank 0),
	// "serve" right after answering its first HTTP request (so a prober
	// sees an answer, then a refused port). "" never fails.
	FailAt string
	// NoFollow opens weight files with O_NOFOLLOW, refusing symlinks like
	// runtimes that demand regular-file trees.
	NoFollow bool

	// EngramDir holds this rank's engram tables (packed files or a
	// sparse-copy tree with engram-local.json); empty skips the check.
	EngramDir string
	// EngramRows is the total row count per layer (SPARK_ENGRAM_ROWS); nil
	// checks each file's row range for consistency with its tp/rank only.
	EngramRows []int64
	// EngramRecordBytes is the record size this runtime reads from packed
	// files (ENGINE_SIM_ENGRAM_RECORD_BYTES); 0 takes the header's.
	EngramRecordBytes int64

	// Ignored lists the unknown engine flags that were accepted and ignored.
	Ignored []string
	// BootLines are printed verbatim by every rank once loaded
	// (ENGINE_SIM_BOOT_LINES): the lines probe log_signatures look for.
	BootLines []string
	// LogEnv are NAME=VALUE lines every rank prints when it starts
	// (EnvLogEnv).
	LogEnv []string
	// APIKey, when set (--api-key, VLLM_API_KEY), is required on every
	// /v1 request as "Authorization: Bearer KEY", as vLLM and SGLang do.
	APIKey string

	// Log receives progress lines (load, join, serve); nil discards them.
	Log io.Writer
	// OnServing is called with the API address once rank 0 serves (tests).
	OnServing func(addr net.Addr)
	// OnDistListen is called with rank 0's rendezvous address (tests that
	// pass port 0).
	OnDistListen func(addr net.Addr)
	// Heartbeat is the rank heartbeat interval (default 500ms); a peer
	// silent for 6 intervals, and at least 30 s, counts as gone (one that
	// closes its connection, at once).
	Heartbeat time.Duration
}

func (c *Config) defaults() {
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.NNodes < 1 {
		c.NNodes = 1
	}
	if c.TP < 1 {
		c.TP = c.NNodes
	}
	if c.ContextLength <= 0 {
		c.ContextLength = 32768
	}
	if c.PrefillTPS <= 0 {
		c.PrefillTPS = 2000
	}
	if c.DecodeTPS <= 0 {
		c.DecodeTPS = 50
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 500 * time.Millisecond
	}
	if c.ServedModelName == "" {
		c.ServedModelName = c.ModelPath
	}
}

// Validate reports a config that cannot run, naming the flag.
func (c *Config) Validate() error {
	var errs []error
	if c.ModelPath == "" {
		errs = append(errs, errors.New("no model path: pass it as the first argument or --model-path"))
	}
	if c.NodeRank < 0 || c.NodeRank >= max(c.NNodes, 1) {
		errs = append(errs, fmt.Errorf("--node-rank %d outside 0..%d (--nnodes %d)", c.NodeRank, max(c.NNodes, 1)-1, c.NNodes))
	}
	if c.NNodes > 1 {
		if _, _, err := net.SplitHostPort(c.DistInitAddr); err != nil {
			errs = append(errs, fmt.Errorf("--nnodes %d needs --dist-init-addr HOST:PORT (or --master-addr and --master-port), got %q", c.NNodes, c.DistInitAddr))
		}
	}
	switch c.FailAt {
	case "", FailLoad, FailJoin, FailServe:
	default:
		errs = append(errs, fmt.Errorf("--fail-at %q: want load, join or serve", c.FailAt))
	}
	if c.Port < 0 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d outside 0..65535", c.Port))
	}
	if c.LoadMiBps < 0 || c.PrefillTPS < 0 || c.DecodeTPS < 0 {
		errs = append(errs, errors.New("--load-mibps, --prefill-tps and --decode-tps must not be negative"))
	}
	if c.JitterPct < 0 || c.JitterPct >= 100 {
		errs = append(errs, fmt.Errorf("--jitter-pct %g outside 0..100 (exclusive): it is the ± %% a request's rates vary by", c.JitterPct))
	}
	return errors.Join(errs...)
}

// Run loads, joins and serves until ctx is done (nil) or something fails
// (an error that reads as one line naming the file, rank or phase).
func Run(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	e := &engine{cfg: cfg, log: cfg.Log}
	if e.log == nil {
		e.log = io.Discard
	}
	for _, f := range cfg.Ignored {
		e.logf("ignoring engine flag %s (not simulated)", f)
	}
	for _, kv := range cfg.LogEnv {
		e.logf("env %s", kv)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// Rendezvous first, concurrently with the load, like NCCL init: a rank
	// that dies while loading is noticed by rank 0 at once.
	var mesh *mesh
	if cfg.NNodes > 1 {
		m, err := startMesh(ctx, cancel, &e.cfg, e.logf)
		if err != nil {
			return err
		}
		mesh = m
		defer mesh.close()
	}

	start := time.Now()
	st, err := e.load(ctx)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	e.loadSeconds = time.Since(start).Seconds()
	e.loadBytes = st.bytes
	e.logf("loaded %d safetensors files (%d tensors, %s) in %.2fs from %s", st.files, st.tensors, contract.HumanBytes(st.bytes), e.loadSeconds, st.dir)
	e.logMu.Lock()
	for _, l := range cfg.BootLines {
		fmt.Fprintln(e.log, l)
	}
	e.logMu.Unlock()

	if cfg.FailAt == FailJoin {
		return fmt.Errorf("rank %d: simulated failure while joining (--fail-at join)", cfg.NodeRank)
	}
	if mesh != nil {
		if err := mesh.loaded(ctx); err != nil {
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return cause
			}
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	if cfg.NodeRank != 0 {
		e.logf("rank %d joined rank 0 at %s; serving as a worker", cfg.NodeRank, cfg.DistInitAddr)
		<-ctx.Done()
		return causeOrNil(ctx)
	}
	return e.serve(ctx, cancel)
}

func causeOrNil(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	return nil
}

// engine is one running engine-sim.
type engine struct {
	cfg Config
	log io.Writer

	logMu       sync.Mutex
	loadSeconds float64
	loadBytes   int64
	metrics     metrics
}

func (e *engine) logf(format string, args ...any) {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	fmt.Fprintf(e.log, "engine-sim: "+format+"\n", args...)
}
