package cli

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/testkit/fittest"
)

// hostileFleet is fitFleet (org/big, org/small; lanes big and small) plus
// lanes whose memory fit meets values no model or engine has: wide
// (-tp 4294967296 -pp 4294967296, whose product wrapped to 0 ranks and
// divided by zero), long (--max-model-len 9007199254740993k), deep
// (num_hidden_layers = 2^63-1 in config.json) and huge (a 2 GiB
// config.json, sparse). It returns the config and the lanes' files.
func hostileFleet(t *testing.T) (string, []string) {
	t.Helper()
	cfg := fitFleet(t)
	dir := filepath.Dir(cfg)
	nas, lanes := filepath.Join(dir, "nas"), filepath.Join(dir, "lanes")
	deepCfg := map[string]any{}
	for k, v := range fittest.Config {
		deepCfg[k] = v
	}
	deepCfg["num_hidden_layers"] = int64(math.MaxInt64)
	fittest.Snapshot(t, nas, "org/deep", deepCfg, 1e9)
	huge := fittest.Snapshot(t, nas, "org/huge", fittest.Config, 1e9)
	if err := os.Truncate(filepath.Join(huge, "config.json"), 2<<30); err != nil {
		t.Fatal(err)
	}
	recipe := func(name, model, flags string) {
		writeConfigTestFile(t, lanes, name+".toml", "runtime = \"vllm\"\nimage = \"i\"\nmodel = \"org/"+model+"\"\ncluster = \"one\"\n"+
			"command = \"vllm serve {model} "+flags+"\"\n")
	}
	recipe("wide", "small", "-tp 4294967296 -pp 4294967296")
	recipe("long", "small", "--max-model-len 9007199254740993k")
	recipe("deep", "deep", "--max-model-len 8192")
	recipe("huge", "huge", "--max-model-len 8192")
	files, _ := filepath.Glob(filepath.Join(lanes, "*.toml"))
	return cfg, files
}

// checkJSON runs `recipe check` with args and returns its exit code,
// errors and notices.
func checkJSON(t *testing.T, args ...string) (int, []string, []string) {
	t.Helper()
	code, out, errOut := runStarter(t, append([]string{"--json", "recipe", "check"}, args...)...)
	var res struct {
		Errors  []string `json:"errors"`
		Notices []string `json:"notices"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("recipe check %v: %v\n%s%s", args, err, out, errOut)
	}
	return code, res.Errors, res.Notices
}

// recipe check and cutover --dry-run meet values no model or engine has
// as errors naming the flag, key or file — never a panic, a wrap, or a
// negative need that "fits" — and recipe check FILE shows the fit's
// notices exactly as recipe check without files does.
func TestFitOfHostileValues(t *testing.T) {
	cfg, files := hostileFleet(t)
	lanes := filepath.Dir(files[0])
	want := map[string]string{
		"wide": "wide.toml: memory fit of lane wide not estimated: tensor parallel × pipeline parallel passes 2^63-1 at -pp 4294967296 (4294967296 × 4294967296)",
		"long": "long.toml: memory fit of lane long not estimated: the KV cache of one 9007199254740992000-token sequence passes 2^63-1 at --max-model-len 9007199254740993k",
		"deep": "deep.toml: memory fit of lane deep not estimated: the KV cache of one 8192-token sequence passes 2^63-1 at num_hidden_layers 9223372036854775807 (÷ pp 1) in ",
		"huge": "huge.toml: memory fit of lane huge not estimated: " + filepath.Join(filepath.Dir(cfg), "nas", "models--org--huge", "snapshots", fittest.Rev, "config.json") + ": 2147483648 bytes, over the 16777216-byte (16 MiB) limit",
	}

	code, errs, without := checkJSON(t, "--config", cfg)
	if code != 1 || len(errs) != 1 || !strings.Contains(errs[0], "lane big does not fit") {
		t.Errorf("recipe check: exit %d, errors %q", code, errs)
	}
	for lane, w := range want {
		if !slices.ContainsFunc(without, func(n string) bool { return strings.Contains(n, w) }) {
			t.Errorf("recipe check: no notice for lane %s saying\n  %s\nnotices:\n  %s", lane, w, strings.Join(without, "\n  "))
		}
	}
	for _, n := range without {
		if strings.Contains(n, "fits in memory") && !strings.HasPrefix(n, "lane small fits") {
			t.Errorf("recipe check: a hostile lane fits: %s", n)
		}
	}

	_, _, with := checkJSON(t, append([]string{"--config", cfg}, files...)...)
	_, _, withCfg := checkJSON(t, append([]string{cfg}, files...)...)
	slices.Sort(without)
	slices.Sort(with)
	slices.Sort(withCfg)
	if !slices.Equal(without, with) || !slices.Equal(with, withCfg) {
		t.Errorf("the fit's notices differ:\nrecipe check:\n  %s\nrecipe check FILE...:\n  %s\nrecipe check CONFIG FILE...:\n  %s",
			strings.Join(without, "\n  "), strings.Join(with, "\n  "), strings.Join(withCfg, "\n  "))
	}
	_, _, one := checkJSON(t, "--config", cfg, filepath.Join(lanes, "wide.toml"))
	if len(one) != 1 || !strings.Contains(one[0], want["wide"]) {
		t.Errorf("recipe check wide.toml: notices %q", one)
	}

	for lane, w := range want {
		code, out, errOut := runStarter(t, "--config", cfg, "cutover", "--lane", lane, "--dry-run")
		w = strings.TrimPrefix(w, lane+".toml: ")
		if code != 0 || !strings.Contains(out, "notice: "+w) || strings.Contains(out, "fits") {
			t.Errorf("cutover --lane %s --dry-run: exit %d, want the notice %q\n%s%s", lane, code, w, out, errOut)
		}
	}
}

// A sparkrun recipe whose tensor_parallel × pipeline_parallel passes int64
// wrapped to a world of 0 nodes and the render indexed past it: a panic
// in recipe check (whose fit renders every recipe) and, through -o, in
// cutover --dry-run. It is an error naming the values.
func TestWorldShapeOverflowIsAnError(t *testing.T) {
	cfg := fitFleet(t)
	lanes := filepath.Join(filepath.Dir(cfg), "lanes")
	head := "recipe_version: \"2\"\nmodel: org/small\nruntime: vllm\ncontainer: i\ncluster: one\ncommand: vllm serve {model} -tp {tensor_parallel} -pp {pipeline_parallel}\n"
	p := writeConfigTestFile(t, lanes, "world.yaml", head+"defaults:\n  tensor_parallel: 4294967296\n  pipeline_parallel: 4294967296\n")
	code, errs, _ := checkJSON(t, "--config", cfg, p)
	if code != 1 || len(errs) == 0 || !strings.Contains(strings.Join(errs, "\n"), p+": defaults.tensor_parallel") {
		t.Errorf("recipe check: exit %d %q", code, errs)
	}
	writeConfigTestFile(t, lanes, "world.yaml", head+"defaults:\n  tensor_parallel: 1\n  pipeline_parallel: 1\n")
	code, out, errOut := runStarter(t, "--config", cfg, "cutover", "--lane", "world", "--dry-run", "-o", "tensor_parallel=4294967296", "-o", "pipeline_parallel=4294967296")
	if code == 0 || !strings.Contains(out+errOut, "tensor_parallel 4294967296 × pipeline_parallel 4294967296 × data_parallel 1 passes 2^63-1 nodes") {
		t.Errorf("cutover --dry-run: exit %d\n%s%s", code, out, errOut)
	}
}

// max_model_len is read as vLLM reads it wherever it is written — a
// recipe's [defaults], a sparkrun YAML recipe, -o — by the one parser the
// fit uses: "32k" is 32,000 tokens, "25.6k" is 25,600 (it was an error,
// and the lane silently not estimated), and a value vLLM refuses ("1.5M":
// decimals with a binary unit) is an error naming the key.
func TestMaxModelLenReadAsVLLMDoes(t *testing.T) {
	cfg := fitFleet(t)
	lanes := filepath.Join(filepath.Dir(cfg), "lanes")
	os.Remove(filepath.Join(lanes, "big.toml"))
	writeConfigTestFile(t, lanes, "k.toml", "runtime = \"vllm\"\nimage = \"i\"\nmodel = \"org/small\"\ncluster = \"one\"\n"+
		"command = \"vllm serve {model} --max-model-len {max_model_len}\"\n[defaults]\nmax_model_len = \"32k\"\n")
	writeConfigTestFile(t, lanes, "y.yaml", "recipe_version: \"2\"\nmodel: org/small\nruntime: vllm\ncontainer: i\ncluster: one\n"+
		"defaults:\n  max_model_len: 25.6k\ncommand: vllm serve {model} --max_model_len {max_model_len}\n")
	code, errs, notices := checkJSON(t, "--config", cfg)
	all := strings.Join(notices, "\n")
	if code != 0 || len(errs) != 0 || !strings.Contains(all, "lane k fits in memory") || !strings.Contains(all, "× 32000 tokens (--max-model-len 32k) ×") ||
		!strings.Contains(all, "lane y fits in memory") || !strings.Contains(all, "× 25600 tokens (--max-model-len 25.6k) ×") {
		t.Errorf("recipe check: exit %d %q\n%s", code, errs, all)
	}
	code, out, errOut := runStarter(t, "--config", cfg, "cutover", "--lane", "k", "--dry-run", "-o", "max_model_len=32K")
	if code != 0 || !strings.Contains(out, "× 32768 tokens (--max-model-len 32K) ×") {
		t.Errorf("-o max_model_len=32K: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runStarter(t, "--config", cfg, "cutover", "--lane", "k", "--dry-run", "-o", "max_model_len=1.5M")
	if code == 0 || !strings.Contains(out+errOut, "-o max_model_len=1.5M: \"1.5M\": decimals are not allowed with the binary unit M") {
		t.Errorf("-o max_model_len=1.5M: exit %d\n%s%s", code, out, errOut)
	}
	bad := writeConfigTestFile(t, lanes, "bad.toml", "runtime = \"vllm\"\nimage = \"i\"\nmodel = \"org/small\"\ncluster = \"one\"\n"+
		"command = \"vllm serve {model} --max-model-len {max_model_len}\"\n[defaults]\nmax_model_len = \"1.5M\"\n")
	code, errs, _ = checkJSON(t, "--config", cfg, bad)
	if code != 1 || len(errs) != 1 || !strings.Contains(errs[0], bad+": defaults.max_model_len: \"1.5M\": decimals are not allowed") {
		t.Errorf("recipe check of max_model_len = \"1.5M\": exit %d %q", code, errs)
	}
}
