package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/testkit/fittest"
)

// fitFleet is a fleet whose NAS holds org/big (100B BF16 parameters in
// two sparse shards: 200 GB by their headers) and org/small (1B), with
// vLLM lanes of each on cluster one (node a, a DGX Spark by default) and
// cluster two (node b, gpu_memory = "512GB").
func fitFleet(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	nas := filepath.Join(dir, "nas")
	fittest.Snapshot(t, nas, "org/big", fittest.Config, 50e9, 50e9)
	fittest.Snapshot(t, nas, "org/small", fittest.Config, 1e9)
	lanes := filepath.Join(dir, "lanes")
	for _, m := range []string{"big", "small"} {
		writeConfigTestFile(t, lanes, m+".toml", "runtime = \"vllm\"\nimage = \"i\"\nmodel = \"org/"+m+"\"\ncluster = \"one\"\n"+
			"command = \"vllm serve {model} --max-model-len 8192\"\n")
	}
	return writeConfigTestFile(t, dir, "sparklane.toml", "recipes_dir = \"lanes\"\nhf_cache_dir = \""+nas+"\"\n"+
		"[[nodes]]\nname = \"a\"\nroots = [\"/nvme\"]\n[[nodes]]\nname = \"b\"\nroots = [\"/nvme\"]\ngpu_memory = \"512GB\"\n"+
		"[[clusters]]\nname = \"one\"\nnodes = [\"a\"]\n[[clusters]]\nname = \"two\"\nnodes = [\"b\"]\n")
}

// recipe check, cutover --dry-run and cutover refuse a lane whose
// weights cannot fit, showing the arithmetic, before anything starts;
// --force overrides; a lane that fits passes; gpu_memory wins over the
// DGX Spark default.
func TestMemoryFitRefusesBeforeStaging(t *testing.T) {
	cfg := fitFleet(t)
	exe, marker := markerExe(t)
	t.Setenv("SPARKLANE_CONTROL_EXE", exe)
	arithmetic := "node a: need 200.0 GB + 2.0 GB = 202.0 GB > 0.9 (gpu_memory_utilization default) × 128.0 GB (DGX Spark default) = 115.2 GB: DOES NOT FIT"

	code, out, errOut := runStarter(t, "--config", cfg, "--json", "recipe", "check")
	var res struct {
		Errors  []string `json:"errors"`
		Notices []string `json:"notices"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 {
		t.Fatalf("recipe check: exit %d %v\n%s%s", code, err, out, errOut)
	}
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0], "big.toml: lane big does not fit in memory on a") || !strings.Contains(res.Errors[0], arithmetic) {
		t.Errorf("recipe check errors: %q", res.Errors)
	}
	if len(res.Notices) != 1 || !strings.Contains(res.Notices[0], "lane small fits in memory") || !strings.Contains(res.Notices[0], "need 2.0 GB + 2.0 GB = 4.0 GB ≤ 0.9") {
		t.Errorf("recipe check notices: %q", res.Notices)
	}

	code, out, errOut = runStarter(t, "--config", cfg, "cutover", "--lane", "big")
	if code == 0 || !strings.Contains(errOut, arithmetic) || !strings.Contains(errOut, "weights 200.0 GB (100.0B params, BF16, 2 file(s)") {
		t.Errorf("cutover: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the refused cutover started the control service")
	}

	code, out, errOut = runStarter(t, "--config", cfg, "cutover", "--lane", "big", "--dry-run")
	if code != 1 || !strings.Contains(out, "REFUSED: lane big does not fit") || !strings.Contains(out, arithmetic) {
		t.Errorf("cutover --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runStarter(t, "--config", cfg, "cutover", "--lane", "big", "--dry-run", "--force")
	if code != 0 || !strings.Contains(out, "notice: --force: running it although lane big does not fit") {
		t.Errorf("cutover --dry-run --force: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runStarter(t, "--config", cfg, "cutover", "--lane", "small", "--dry-run")
	if code != 0 || !strings.Contains(out, "node a: need 2.0 GB + 2.0 GB = 4.0 GB ≤ 0.9 (gpu_memory_utilization default) × 128.0 GB (DGX Spark default) = 115.2 GB: fits") {
		t.Errorf("cutover --dry-run of a lane that fits: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runStarter(t, "--config", cfg, "cutover", "--lane", "big", "--cluster", "two", "--dry-run")
	if code != 0 || !strings.Contains(out, "× 512.0 GB (gpu_memory in "+cfg+") = 460.8 GB: fits") {
		t.Errorf("cutover --dry-run on a node with gpu_memory: exit %d\n%s%s", code, out, errOut)
	}

	// --force: past the fit, the cutover goes on to start its run (here
	// the control service, a marker program, fails to start).
	code, out, errOut = runStarter(t, "--config", cfg, "cutover", "--lane", "big", "--force")
	if _, err := os.Stat(marker); err != nil || code == 0 || !strings.Contains(errOut, "warning: --force: running it although") {
		t.Errorf("cutover --force did not go past the memory fit: exit %d %v\n%s%s", code, err, out, errOut)
	}
}
