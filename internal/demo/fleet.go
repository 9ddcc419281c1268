package demo

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sparklane/sparklane/internal/atomicfile"
)

// Lanes are the demo's two lanes.
var Lanes = []string{"demo-4x", "demo-2x"}

// Nodes is how many local nodes the demo fleet has.
const Nodes = 4

// Fleet is the demo's world on disk.
type Fleet struct {
	Dir        string
	ConfigFile string
	NAS        NAS
}

// ConfigHeader starts every demo config: `starter demo --clean` removes a
// dir only when its sparklane.toml begins with it.
const ConfigHeader = "# Written by `starter demo`:"

// WriteFleet writes the demo's sparklane.toml and recipes under dir:
// nodes demo1..demo4 on this machine, each with its own fs_root (so they do
// not share a disk), clusters demo-4x and demo-2x, the NAS as a shared root.
func WriteFleet(dir, stateDir string, nas NAS, image string, port, uiPort int) (Fleet, error) {
	f := Fleet{Dir: dir, ConfigFile: filepath.Join(dir, "sparklane.toml"), NAS: nas}
	var b strings.Builder
	fmt.Fprintf(&b, "%s a fleet of %d simulated nodes on this machine.\n", ConfigHeader, Nodes)
	fmt.Fprintf(&b, "state_dir = %q\nrecipes_dir = %q\nhf_cache_dir = %q\nshared_roots = [%q]\nprobe_grace = \"2s\"\n\n",
		stateDir, filepath.Join(dir, "recipes"), nas.Hub, filepath.Dir(nas.Hub))
	fmt.Fprintf(&b, "[temporal]\naddress = \"\"\nnamespace = \"default\"\nport = %d\nui_port = %d\n\n", port, uiPort)
	var all []string
	for i := 1; i <= Nodes; i++ {
		name := fmt.Sprintf("demo%d", i)
		all = append(all, fmt.Sprintf("%q", name))
		root := filepath.Join(dir, "nodes", name)
		if err := os.MkdirAll(filepath.Join(root, "srv", "sparklane"), 0o755); err != nil {
			return f, err
		}
		fmt.Fprintf(&b, "[[nodes]]\nname = %q\nssh = \"\"\naddress = \"127.0.0.1\"\nroots = [\"/srv/sparklane\"]\nfs_root = %q\n\n", name, root)
	}
	fmt.Fprintf(&b, "[[clusters]]\nname = \"demo-4x\"\nnodes = [%s]\n\n", strings.Join(all, ", "))
	fmt.Fprintf(&b, "[[clusters]]\nname = \"demo-2x\"\nnodes = [%s]\n\n", strings.Join(all[:2], ", "))
	// The simulated nodes share this machine's memory, which a laptop may
	// not have 8 GiB of to spare: a lower floor keeps a cutover's stage
	// beside the serving lane from pausing there for good.
	b.WriteString("# Staging beside a serving lane pauses while this machine's MemAvailable\n# is under min_available (default 8G; docs/operations.md).\n[staging]\nmin_available = \"1G\"\n")
	if err := os.MkdirAll(filepath.Join(dir, "recipes"), 0o755); err != nil {
		return f, err
	}
	if err := atomicfile.Write(f.ConfigFile, []byte(b.String()), 0o644); err != nil {
		return f, err
	}
	if err := WriteRecipes(filepath.Join(dir, "recipes"), image, nas, 18080); err != nil {
		return f, err
	}
	return f, nil
}

// WriteRecipes writes the demo lanes' recipes into dir: demo-4x serves its
// API on apiPort, demo-2x on apiPort+10.
func WriteRecipes(dir, image string, nas NAS, apiPort int) error {
	for _, l := range []struct {
		name, alias string
		apiPort     int
		decode      int
	}{{"demo-4x", "d4", apiPort, DecodeTPS["demo-4x"]}, {"demo-2x", "d2", apiPort + 10, DecodeTPS["demo-2x"]}} {
		if err := atomicfile.Write(filepath.Join(dir, l.name+".toml"), []byte(recipe(l.name, l.alias, image, nas, l.apiPort, l.decode)), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// DecodeTPS is each demo lane's configured decode rate (tok/s).
var DecodeTPS = map[string]int{"demo-4x": 150, "demo-2x": 100}

func recipe(name, alias, image string, nas NAS, apiPort, decode int) string {
	layers := make([]string, len(EngramLayers))
	for i, l := range EngramLayers {
		layers[i] = fmt.Sprint(l)
	}
	return fmt.Sprintf(`# Demo lane %[1]s: engine-sim (runtime sim) on cluster %[1]s.
name = %[1]q
aliases = [%[2]q]
cluster = %[1]q
runtime = "sim"
image = %[3]q
model = %[4]q
command = "/engine-sim /hub --served-model-name {model} --host 0.0.0.0 --port {port} --tp {tensor_parallel} --decode-tps {decode_tps} --prefill-tps {prefill_tps} --context-length {context_length} {extra_args}"

[defaults]
port = %[5]d
dist_port = %[6]d
decode_tps = %[7]d
prefill_tps = 4000
context_length = 16384
# extra_args passes engine-sim knobs through -o (e.g. -o extra_args=--fail-at=load).
extra_args = ""

[env]
SIM_LANE = %[1]q

# The NAS hub, bound where the engine looks; staging swaps in the node's mirror.
[[mounts]]
src = %[8]q
dst = "/hub"
read_only = true

[[staging]]
kind = "hub-mirror"
id = "weights"
src = %[8]q
dst = "/srv/sparklane/hf"
repos = [%[4]q]
verify = "sampled"
min_free = "1G"

[[staging]]
kind = "sparse-rows"
id = "engram"
format = "packed"
src = %[9]q
dst = "/srv/sparklane/engram"
tensors = ["model.layers.{L}.engram.table"]
layers = [%[10]s]
mount = "/engram"
env = "SPARK_ENGRAM_DIR"

[hooks]
clear = ["/srv/sparklane/receipts"]

[probe]
ready = "5m"
decode_prompt_tokens = 256
decode_max_tokens = 64

[[probe.smoke]]
prompt = "What is 127*89?"
expect = "11303"

[[probe.smoke]]
prompt = "19+23"
expect = "42"

[bench]
prompt_lengths = [512, 2048]
depths = [0, 2048]
concurrency = [1, 2]
gen_tokens = 48
`, name, alias, image, ModelRepo, apiPort, apiPort+1000, decode, nas.Hub, nas.EngramSnapshot, strings.Join(layers, ", "))
}
