package sim_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/sim"
)

// TestParseArgsTable pins every flag ParseArgs accepts and every input it
// refuses: each case is a command line and an environment, and the whole
// Config (or the error) it parses to.
func TestParseArgsTable(t *testing.T) {
	cases := []struct {
		name string
		args string
		env  map[string]string
		want string // the Config's fields that are set, or "error: " and its message
	}{
		{"empty", "", nil, "Port=8000"},
		{"model path flag", "--model-path /m", nil, "ModelPath=/m Port=8000"},
		{"model flag", "--model=/m", nil, "ModelPath=/m Port=8000"},
		{"positional model", "/m --port 8001", nil, "ModelPath=/m Port=8001"},
		{"vllm serve", "serve /m extra1 extra2", nil, "ModelPath=/m Port=8000 Ignored=extra1|extra2"},
		{"binary name first", "/usr/bin/engine-sim serve /m", nil, "ModelPath=/m Port=8000"},
		{"model given twice", "/a --model-path /b", nil, "error: model path given twice: \"/a\" and --model-path \"/b\""},
		{"same model twice", "/a --model-path /a", nil, "ModelPath=/a Port=8000"},
		{"double dash", "--port 9 -- --not-a-flag /x", nil, "ModelPath=--not-a-flag Port=9 Ignored=/x"},
		{"single dash", "- --port 1", nil, "ModelPath=- Port=1"},
		{"host and port", "--host 0.0.0.0 --port=0", nil, "Host=0.0.0.0"},
		{"tp spellings", "--tp 2 --tp-size 3 --tensor-parallel-size 4", nil, "Port=8000 TP=4"},
		{"underscores", "--tensor_parallel_size 4 --node_rank 1 --nnodes 2", nil, "Port=8000 TP=4 NNodes=2 NodeRank=1"},
		{"single-dash flags", "-tp 4 -nnodes 4", nil, "Port=8000 TP=4 NNodes=4"},
		{"dist init addr", "--dist-init-addr 10.0.0.1:29500", nil, "Port=8000 DistInitAddr=10.0.0.1:29500"},
		{"master addr and port", "--master-addr 10.0.0.1 --master-port 29501", nil, "Port=8000 DistInitAddr=10.0.0.1:29501"},
		{"master addr alone", "--master-addr 10.0.0.1", nil, "error: --master-addr \"10.0.0.1\" and --master-port \"\" must be given together"},
		{"master port alone", "--master-port 29501", nil, "error: --master-addr \"\" and --master-port \"29501\" must be given together"},
		{"dist init wins over master", "--dist-init-addr h:1 --master-addr 10.0.0.1", nil, "Port=8000 DistInitAddr=h:1"},
		{"headless switch", "--headless", nil, "Port=8000 Headless=true"},
		{"headless value", "--headless=false", nil, "Port=8000"},
		{"headless bad value", "--headless=maybe", nil, "error: --headless=\"maybe\": not a boolean"},
		{"headless does not take the next word", "--headless /m", nil, "ModelPath=/m Port=8000 Headless=true"},
		{"context length", "--context-length 1024", nil, "Port=8000 ContextLength=1024"},
		{"max model len", "--max-model-len 2048", nil, "Port=8000 ContextLength=2048"},
		{"max model len as vLLM reads it", "--max-model-len 32k", nil, "Port=8000 ContextLength=32000"},
		{"max model len binary unit", "--max_model_len=32K", nil, "Port=8000 ContextLength=32768"},
		{"max model len auto", "--max-model-len auto", nil, "Port=8000"},
		{"max model len decimal binary unit", "--max-model-len 1.5M", nil, "error: --max-model-len \"1.5M\": \"1.5M\": decimals are not allowed with the binary unit M (1024^2), as vLLM refuses them: write 1.5m for powers of 1000, or a whole number of M"},
		{"served model name", "--served-model-name org/m", nil, "ServedModelName=org/m Port=8000"},
		{"pacing flags", "--load-mibps 1.5 --prefill-tps 900 --decode-tps 12 --jitter-pct 3 --seed 42", nil, "Port=8000 LoadMiBps=1.5 PrefillTPS=900 DecodeTPS=12 JitterPct=3 Seed=42"},
		{"negative seed", "--seed -7", nil, "Port=8000 Seed=-7"},
		{"fail at", "--fail-at join", nil, "Port=8000 FailAt=join"},
		{"nofollow", "--nofollow", nil, "Port=8000 NoFollow=true"},
		{"engram dir flag", "--engram-dir /e", map[string]string{"SPARK_ENGRAM_DIR": "/not-this"}, "Port=8000 EngramDir=/e"},
		{"engram env flag", "--engram-env MY_DIR", map[string]string{"MY_DIR": "/mine", "SPARK_ENGRAM_DIR": "/not-this"}, "Port=8000 EngramDir=/mine"},
		{"engram env unset", "--engram-env MY_DIR", map[string]string{"SPARK_ENGRAM_DIR": "/not-this"}, "Port=8000"},
		{"default engram envs in order", "", map[string]string{"DSV41_PACKED_DIR": "/second"}, "Port=8000 EngramDir=/second"},
		{"first default engram env wins", "", map[string]string{"SPARK_ENGRAM_DIR": "/first", "DSV41_PACKED_DIR": "/second"}, "Port=8000 EngramDir=/first"},
		{"api key flag", "--api-key k1", map[string]string{"VLLM_API_KEY": "k2"}, "Port=8000 APIKey=k1"},
		{"api key env", "", map[string]string{"VLLM_API_KEY": "k2"}, "Port=8000 APIKey=k2"},
		{"unknown flag with value", "--mem-fraction-static 0.88", nil, "Port=8000 Ignored=--mem-fraction-static 0.88"},
		{"unknown flag with negative number", "--offset -3", nil, "Port=8000 Ignored=--offset -3"},
		{"unknown flag with equals", "--quantization=fp8", nil, "Port=8000 Ignored=--quantization fp8"},
		{"unknown switch by prefix", "--enable-foo /m", nil, "ModelPath=/m Port=8000 Ignored=--enable-foo"},
		{"unknown switch by name", "--trust-remote-code /m", nil, "ModelPath=/m Port=8000 Ignored=--trust-remote-code"},
		{"unknown flag before a flag", "--foo --port 1", nil, "Port=1 Ignored=--foo"},
		{"unknown flag last", "--foo", nil, "Port=8000 Ignored=--foo"},
		{"missing value", "--port", nil, "error: --port needs a value"},
		{"bad int", "--port x", nil, "error: --port \"x\": not an integer"},
		{"bad int64", "--seed 1.5", nil, "error: --seed \"1.5\": not an integer"},
		{"bad float", "--decode-tps fast", nil, "error: --decode-tps \"fast\": not a number"},
		{"env pacing knobs", "", map[string]string{"ENGINE_SIM_LOAD_MIBPS": "2", "ENGINE_SIM_PREFILL_TPS": "100", "ENGINE_SIM_DECODE_TPS": "33", "ENGINE_SIM_JITTER_PCT": "5", "ENGINE_SIM_FAIL_AT": "load", "ENGINE_SIM_NOFOLLOW": "1"}, "Port=8000 LoadMiBps=2 PrefillTPS=100 DecodeTPS=33 JitterPct=5 FailAt=load NoFollow=true"},
		{"flags win over env", "--load-mibps 1 --prefill-tps 2 --decode-tps 3 --jitter-pct 4 --fail-at serve --nofollow=false", map[string]string{"ENGINE_SIM_LOAD_MIBPS": "x", "ENGINE_SIM_PREFILL_TPS": "x", "ENGINE_SIM_DECODE_TPS": "x", "ENGINE_SIM_JITTER_PCT": "x", "ENGINE_SIM_FAIL_AT": "load", "ENGINE_SIM_NOFOLLOW": "x"}, "Port=8000 LoadMiBps=1 PrefillTPS=2 DecodeTPS=3 JitterPct=4 FailAt=serve"},
		{"bad env load", "", map[string]string{"ENGINE_SIM_LOAD_MIBPS": "x"}, "error: env ENGINE_SIM_LOAD_MIBPS=\"x\": not a number"},
		{"bad env prefill", "", map[string]string{"ENGINE_SIM_PREFILL_TPS": "x"}, "error: env ENGINE_SIM_PREFILL_TPS=\"x\": not a number"},
		{"bad env decode", "", map[string]string{"ENGINE_SIM_DECODE_TPS": "x"}, "error: env ENGINE_SIM_DECODE_TPS=\"x\": not a number"},
		{"bad env jitter", "", map[string]string{"ENGINE_SIM_JITTER_PCT": "x"}, "error: env ENGINE_SIM_JITTER_PCT=\"x\": not a number"},
		{"bad env nofollow", "", map[string]string{"ENGINE_SIM_NOFOLLOW": "x"}, "error: env ENGINE_SIM_NOFOLLOW=\"x\": not a boolean"},
		{"boot lines", "", map[string]string{"ENGINE_SIM_BOOT_LINES": "one\r\n\n  \ntwo  "}, "Port=8000 BootLines=one|two  "},
		{"log env", "", map[string]string{"ENGINE_SIM_LOG_ENV": " A, ,B", "A": "1"}, "Port=8000 LogEnv=A=1|B="},
		{"engram rows", "", map[string]string{"SPARK_ENGRAM_ROWS": "10, 12"}, "Port=8000 EngramRows=[10 12]"},
		{"engram rows zero", "", map[string]string{"SPARK_ENGRAM_ROWS": "10,0"}, "error: env SPARK_ENGRAM_ROWS=\"10,0\": want a positive row count, or a comma list of them per layer"},
		{"engram rows not a number", "", map[string]string{"SPARK_ENGRAM_ROWS": "ten"}, "error: env SPARK_ENGRAM_ROWS=\"ten\": want a positive row count, or a comma list of them per layer"},
		{"engram record bytes", "", map[string]string{"ENGINE_SIM_ENGRAM_RECORD_BYTES": " 264 "}, "Port=8000 EngramRecordBytes=264"},
		{"engram record bytes bad", "", map[string]string{"ENGINE_SIM_ENGRAM_RECORD_BYTES": "-1"}, "error: env ENGINE_SIM_ENGRAM_RECORD_BYTES=\"-1\": want a positive record size in bytes"},
		{"hf hub cache", "", map[string]string{"HF_HUB_CACHE": "/hub", "HF_HOME": "/home"}, "HFHubCache=/hub Port=8000"},
		{"hf home", "", map[string]string{"HF_HOME": "/home"}, "HFHubCache=/home/hub Port=8000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := sim.ParseArgs(strings.Fields(tc.args), func(k string) string { return tc.env[k] })
			got := describe(c)
			if err != nil {
				got = "error: " + err.Error()
			}
			if got != tc.want {
				t.Fatalf("ParseArgs(%q)\n got %s\nwant %s", tc.args, got, tc.want)
			}
		})
	}
}

// describe lists the fields ParseArgs can set that differ from their zero
// value, in a fixed order.
func describe(c sim.Config) string {
	var b []string
	add := func(name string, v any, zero bool) {
		if !zero {
			b = append(b, fmt.Sprintf("%s=%v", name, v))
		}
	}
	add("ModelPath", c.ModelPath, c.ModelPath == "")
	add("ServedModelName", c.ServedModelName, c.ServedModelName == "")
	add("HFHubCache", c.HFHubCache, c.HFHubCache == "")
	add("Host", c.Host, c.Host == "")
	add("Port", c.Port, c.Port == 0)
	add("TP", c.TP, c.TP == 0)
	add("NNodes", c.NNodes, c.NNodes == 0)
	add("NodeRank", c.NodeRank, c.NodeRank == 0)
	add("DistInitAddr", c.DistInitAddr, c.DistInitAddr == "")
	add("Headless", c.Headless, !c.Headless)
	add("ContextLength", c.ContextLength, c.ContextLength == 0)
	add("LoadMiBps", c.LoadMiBps, c.LoadMiBps == 0)
	add("PrefillTPS", c.PrefillTPS, c.PrefillTPS == 0)
	add("DecodeTPS", c.DecodeTPS, c.DecodeTPS == 0)
	add("JitterPct", c.JitterPct, c.JitterPct == 0)
	add("Seed", c.Seed, c.Seed == 0)
	add("FailAt", c.FailAt, c.FailAt == "")
	add("NoFollow", c.NoFollow, !c.NoFollow)
	add("EngramDir", c.EngramDir, c.EngramDir == "")
	add("EngramRows", c.EngramRows, c.EngramRows == nil)
	add("EngramRecordBytes", c.EngramRecordBytes, c.EngramRecordBytes == 0)
	add("Ignored", strings.Join(c.Ignored, "|"), c.Ignored == nil)
	add("BootLines", strings.Join(c.BootLines, "|"), c.BootLines == nil)
	add("LogEnv", strings.Join(c.LogEnv, "|"), c.LogEnv == nil)
	add("APIKey", c.APIKey, c.APIKey == "")
	return strings.Join(b, " ")
}
