package sim_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/sparserows"
	"github.com/sparklane/sparklane/internal/sim"
	"github.com/sparklane/sparklane/internal/syncbuf"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

func post(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

type completion struct {
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func startOne(t *testing.T, mut func(*sim.Config)) (*simtest.Engine, sim.Config) {
	t.Helper()
	cfg := sim.Config{
		ModelPath:       simtest.WriteModel(t, t.TempDir(), simtest.Model{}),
		ServedModelName: "org/sim-model",
		DecodeTPS:       500,
		PrefillTPS:      100000,
		ContextLength:   64,
	}
	if mut != nil {
		mut(&cfg)
	}
	e := simtest.Start(t, cfg)
	e.WaitServing(t, 10*time.Second)
	return e, cfg
}

func TestAPI(t *testing.T) {
	e, _ := startOne(t, nil)

	resp, err := http.Get(e.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health: %v %v", resp, err)
	}
	resp.Body.Close()

	resp, err = http.Get(e.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != "org/sim-model" {
		t.Fatalf("/v1/models: %+v", models)
	}

	for _, c := range []struct{ prompt, want string }{
		{"What is 127*89?", "11303"},
		{"19+23", "42"},
		{"What is 19-23?", "-4"},
	} {
		code, body := post(t, e.URL+"/v1/chat/completions", map[string]any{
			"model": "org/sim-model", "messages": []map[string]any{{"role": "user", "content": c.prompt}}, "temperature": 0,
		})
		var r completion
		if err := json.Unmarshal(body, &r); err != nil || code != 200 || len(r.Choices) != 1 {
			t.Fatalf("chat %q: %d %s", c.prompt, code, body)
		}
		if !strings.Contains(r.Choices[0].Message.Content, c.want) {
			t.Errorf("chat %q answered %q, want %q in it", c.prompt, r.Choices[0].Message.Content, c.want)
		}
		if r.Usage == nil || r.Usage.PromptTokens != sim.CountTokens(c.prompt) || r.Usage.CompletionTokens < 1 ||
			r.Usage.TotalTokens != r.Usage.PromptTokens+r.Usage.CompletionTokens {
			t.Errorf("chat %q usage %+v", c.prompt, r.Usage)
		}
	}

	// Plain completion: exactly max_tokens of deterministic text.
	req := map[string]any{"prompt": "tell me about lanes", "max_tokens": 12}
	_, b1 := post(t, e.URL+"/v1/completions", req)
	_, b2 := post(t, e.URL+"/v1/completions", req)
	var r1, r2 completion
	json.Unmarshal(b1, &r1)
	json.Unmarshal(b2, &r2)
	if len(r1.Choices) != 1 || r1.Usage == nil || r1.Usage.CompletionTokens != 12 || r1.Choices[0].Text != r2.Choices[0].Text || *r1.Choices[0].FinishReason != "length" {
		t.Fatalf("completion not 12 deterministic tokens: %s / %s", b1, b2)
	}
	if n := sim.CountTokens(r1.Choices[0].Text); n != 12 {
		t.Errorf("completion text counts %d tokens, usage says 12", n)
	}

	// Wrong model name → 404.
	if code, body := post(t, e.URL+"/v1/completions", map[string]any{"model": "other", "prompt": "x"}); code != 404 {
		t.Errorf("wrong model: %d %s", code, body)
	}

	resp, err = http.Get(e.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`enginesim_requests_total{path="/v1/chat/completions",code="200"} 3`, "enginesim_generation_tokens_total", "enginesim_load_seconds", "enginesim_load_bytes 16384"} {
		if !strings.Contains(string(mb), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, mb)
		}
	}
}

func TestLongPromptRefused(t *testing.T) {
	e, cfg := startOne(t, nil)
	prompt := strings.Repeat("tok ", cfg.ContextLength+5)
	code, body := post(t, e.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 4})
	if code != 400 {
		t.Fatalf("over-long prompt: HTTP %d %s, want 400", code, body)
	}
	var r struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(body, &r)
	want := fmt.Sprintf("maximum context length is %d tokens, prompt has %d", cfg.ContextLength, cfg.ContextLength+5)
	if !strings.Contains(r.Error.Message, want) {
		t.Errorf("error %q does not say %q", r.Error.Message, want)
	}
}

// readSSE returns the data payloads of an SSE stream and the arrival time
// of each.
func readSSE(t *testing.T, r io.Reader) ([]string, []time.Time) {
	t.Helper()
	var data []string
	var at []time.Time
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "data: ") {
			t.Fatalf("SSE line without data: prefix: %q", line)
		}
		data = append(data, strings.TrimPrefix(line, "data: "))
		at = append(at, time.Now())
	}
	return data, at
}

func TestStreamingWithUsage(t *testing.T) {
	decode := 200.0
	e, _ := startOne(t, func(c *sim.Config) { c.DecodeTPS = decode; c.ContextLength = 4096 })
	for _, chat := range []bool{false, true} {
		body := map[string]any{"max_tokens": 40, "stream": true, "stream_options": map[string]any{"include_usage": true}, "temperature": 0}
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
			body["messages"] = []map[string]any{{"role": "user", "content": "write about the lane"}}
		} else {
			body["prompt"] = "write about the lane"
		}
		b, _ := json.Marshal(body)
		resp, err := http.Post(e.URL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
			t.Errorf("%s stream Content-Type %q", path, ct)
		}
		data, at := readSSE(t, resp.Body)
		resp.Body.Close()
		if len(data) < 3 || data[len(data)-1] != "[DONE]" {
			t.Fatalf("%s: stream does not end in [DONE]: %q", path, data)
		}
		var last completion
		if err := json.Unmarshal([]byte(data[len(data)-2]), &last); err != nil || last.Usage == nil {
			t.Fatalf("%s: no usage chunk before [DONE]: %q", path, data[len(data)-2])
		}
		if last.Usage.CompletionTokens != 40 {
			t.Errorf("%s: usage completion_tokens %d, want 40", path, last.Usage.CompletionTokens)
		}
		var text strings.Builder
		var tokTimes []time.Time
		for i, d := range data[:len(data)-2] {
			var c completion
			if err := json.Unmarshal([]byte(d), &c); err != nil || len(c.Choices) != 1 {
				t.Fatalf("%s: bad chunk %q", path, d)
			}
			s := c.Choices[0].Text + c.Choices[0].Delta.Content
			if s != "" {
				tokTimes = append(tokTimes, at[i])
			}
			text.WriteString(s)
		}
		if len(tokTimes) != 40 || sim.CountTokens(text.String()) != 40 {
			t.Errorf("%s: %d token chunks, text of %d tokens, want 40", path, len(tokTimes), sim.CountTokens(text.String()))
		}
		// Pacing: 39 gaps at 1/decode s each can't arrive sooner than that.
		if span := tokTimes[len(tokTimes)-1].Sub(tokTimes[0]); span < time.Duration(float64(39)/decode*0.9*float64(time.Second)) {
			t.Errorf("%s: 40 tokens streamed in %s, faster than %g tok/s", path, span, decode)
		}
	}
}

func distAddr(t *testing.T) string { return fmt.Sprintf("127.0.0.1:%d", simtest.FreePort(t)) }

func TestRankZeroWaitsForRanksAndExitsWhenOneDies(t *testing.T) {
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	dist := distAddr(t)
	port := simtest.FreePort(t)
	base := sim.Config{ModelPath: model, NNodes: 2, DistInitAddr: dist, Heartbeat: 100 * time.Millisecond}
	c0 := base
	c0.Port = port
	r0 := simtest.Start(t, c0)
	url := fmt.Sprintf("127.0.0.1:%d", port)

	// Rank 0 has loaded (tiny model) but rank 1 is not there: refused.
	time.Sleep(500 * time.Millisecond)
	if c, err := net.DialTimeout("tcp", url, time.Second); err == nil {
		c.Close()
		t.Fatal("rank 0 accepted API connections before rank 1 joined")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("rank 0 API before join: %v, want connection refused", err)
	}

	c1 := base
	c1.NodeRank = 1
	r1 := simtest.Start(t, c1)
	r0.WaitServing(t, 10*time.Second)
	code, body := post(t, r0.URL+"/v1/completions", map[string]any{"prompt": "19+23", "max_tokens": 8})
	if code != 200 || !strings.Contains(string(body), "42") {
		t.Fatalf("joined lane answer: %d %s", code, body)
	}

	// Kill rank 1: rank 0 exits non-zero, naming rank 1.
	r1.Stop()
	wantExit(t, r0, "rank 1", "rank 0 after rank 1 died")
}

func TestWorkerExitsWhenRankZeroGoes(t *testing.T) {
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	base := sim.Config{ModelPath: model, NNodes: 2, DistInitAddr: distAddr(t), Heartbeat: 100 * time.Millisecond}
	r1c := base
	r1c.NodeRank = 1
	r1 := simtest.Start(t, r1c) // before rank 0: it must retry
	time.Sleep(300 * time.Millisecond)
	r0 := simtest.Start(t, base)
	r0.WaitServing(t, 10*time.Second)
	r0.Stop()
	wantExit(t, r1, "rank 0", "worker after rank 0 left")
}

// wantExit waits up to 5 s for e to exit with an error containing part
// (what says when, in failures).
func wantExit(t *testing.T, e *simtest.Engine, part, what string) {
	t.Helper()
	select {
	case <-e.Done():
		if err := e.Err(); err == nil || !strings.Contains(err.Error(), part) {
			t.Fatalf("%s: %v, want an error naming %q", what, err, part)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still running 5s later", what)
	}
}

func runErr(t *testing.T, cfg sim.Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg.Host = "127.0.0.1"
	cfg.Port = simtest.FreePort(t)
	return sim.Run(ctx, cfg)
}

func TestCorruptTreesRefused(t *testing.T) {
	mk := func() string { return simtest.WriteModel(t, t.TempDir(), simtest.Model{}) }
	shard := "model-00002-of-00002.safetensors"

	bad := mk()
	os.WriteFile(filepath.Join(bad, shard), []byte("\xff\xff\xff\xff\x00\x00\x00\x00garbage"), 0o644)
	missing := mk()
	os.Remove(filepath.Join(missing, shard))
	truncated := mk()
	fi, _ := os.Stat(filepath.Join(truncated, shard))
	os.Truncate(filepath.Join(truncated, shard), fi.Size()-10)
	linked := mk()
	blob := filepath.Join(t.TempDir(), "blob")
	os.Rename(filepath.Join(linked, shard), blob)
	os.Symlink(blob, filepath.Join(linked, shard))

	for _, c := range []struct {
		name     string
		dir      string
		nofollow bool
		want     string
	}{
		{"bad header", bad, false, shard},
		{"missing shard", missing, false, "missing"},
		{"truncated shard", truncated, false, "truncated"},
		{"symlink under nofollow", linked, true, "symlink"},
	} {
		err := runErr(t, sim.Config{ModelPath: c.dir, NoFollow: c.nofollow})
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, c.want) || !strings.Contains(msg, shard) || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q should be one line naming %s and saying %q", c.name, msg, shard, c.want)
		}
	}
	// The same symlinked tree loads when symlinks are allowed (hub layout).
	ctx, cancel := context.WithCancel(context.Background())
	cfg := sim.Config{ModelPath: linked, Port: simtest.FreePort(t)}
	served := make(chan struct{})
	cfg.OnServing = func(net.Addr) { close(served); cancel() }
	if err := sim.Run(ctx, cfg); err != nil {
		t.Fatalf("symlinked tree without --nofollow: %v", err)
	}
	select {
	case <-served:
	default:
		t.Fatal("symlinked tree without --nofollow never served")
	}
}

func TestHubCacheLayout(t *testing.T) {
	hub := t.TempDir()
	repo := filepath.Join(hub, "models--org--tiny")
	rev := "0123abcd"
	snap := filepath.Join(repo, "snapshots", rev)
	simtest.WriteModel(t, snap, simtest.Model{Shards: 1})
	os.MkdirAll(filepath.Join(repo, "refs"), 0o755)
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(rev+"\n"), 0o644)
	simtest.WriteModel(t, filepath.Join(hub, "models--org--other", "snapshots", "x"), simtest.Model{Shards: 1})

	for _, cfg := range []sim.Config{
		{ModelPath: hub, ServedModelName: "org/tiny"},
		{ModelPath: "org/tiny", HFHubCache: hub},
		{ModelPath: repo},
	} {
		log := &syncbuf.Buffer{}
		ctx, cancel := context.WithCancel(context.Background())
		cfg.Port = simtest.FreePort(t)
		cfg.Log = log
		cfg.OnServing = func(net.Addr) { cancel() }
		if err := sim.Run(ctx, cfg); err != nil {
			t.Fatalf("%+v: %v", cfg.ModelPath, err)
		}
		if !strings.Contains(log.String(), snap) {
			t.Errorf("model %s did not load from %s:\n%s", cfg.ModelPath, snap, log.String())
		}
	}
	if err := runErr(t, sim.Config{ModelPath: hub}); err == nil || !strings.Contains(err.Error(), "--served-model-name") {
		t.Errorf("ambiguous hub cache: %v", err)
	}
}

func writePacked(t *testing.T, dir string, layer, rank, tp int, first, count int64) {
	t.Helper()
	h := sparserows.PackedHeader{Layer: layer, Rank: rank, TP: tp, FirstRow: first, RowCount: count, RecordSize: 8, Tensor: "t", Checkpoint: "c"}
	b, err := h.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, make([]byte, count*8)...)
	if err := os.WriteFile(filepath.Join(dir, sparserows.PackedFileName(layer, rank, tp)), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestEngramPackedChecked(t *testing.T) {
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{Shards: 1})
	const rows = 103
	good := t.TempDir()
	for _, layer := range []int{3, 14} {
		f, c, _ := sparserows.Tile(rows, 4, 2)
		writePacked(t, good, layer, 2, 4, f, c)
	}
	// The rank under test is NodeRank 2 of 4: run it as a worker with no
	// rank 0 and watch it get past the load (it logs "engram files checked").
	check := func(dir string, rowsEnv []int64) (string, error) {
		return runRankOf(t, model, dir, 2, 4, rowsEnv)
	}
	if out, err := check(good, []int64{rows}); err != nil || !strings.Contains(out, "engram files checked: 2") {
		t.Fatalf("good packed engram: %v\n%s", err, out)
	}
	if out, err := check(good, nil); err != nil || !strings.Contains(out, "engram files checked: 2") {
		t.Fatalf("good packed engram without row env: %v\n%s", err, out)
	}
	if _, err := check(good, []int64{rows + 4}); err == nil || !strings.Contains(err.Error(), "engram-l14-r2of4.bin") && !strings.Contains(err.Error(), "engram-l3-r2of4.bin") {
		t.Errorf("wrong SPARK_ENGRAM_ROWS accepted or unnamed: %v", err)
	}
	corrupt := t.TempDir()
	writePacked(t, corrupt, 3, 2, 4, 52, 26)
	p := filepath.Join(corrupt, sparserows.PackedFileName(3, 2, 4))
	b, _ := os.ReadFile(p)
	b[30] ^= 0xff
	os.WriteFile(p, b, 0o644)
	if _, err := check(corrupt, nil); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("corrupt packed header: %v, want an error naming %s", err, p)
	}
	other := t.TempDir()
	writePacked(t, other, 3, 1, 4, 26, 26)
	if _, err := check(other, nil); err == nil || !strings.Contains(err.Error(), "rank 2") {
		t.Errorf("engram dir of another rank: %v", err)
	}
}

func TestLoadRateCap(t *testing.T) {
	// 2 shards x 2 tensors x 64x32 BF16 = 16 KiB; at 0.05 MiB/s ≥ 0.3 s.
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	err := sim.Run(ctx, sim.Config{ModelPath: model, Port: simtest.FreePort(t), LoadMiBps: 0.05, OnServing: func(net.Addr) { cancel() }})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("16 KiB at 0.05 MiB/s loaded in %s: the cap is not applied", d)
	}
}

func TestParseArgs(t *testing.T) {
	env := map[string]string{"ENGINE_SIM_DECODE_TPS": "33", "SPARK_ENGRAM_DIR": "/engram", "HF_HUB_CACHE": "/hub", "SPARK_ENGRAM_ROWS": "10,12", "ENGINE_SIM_LOG_ENV": "HF_HUB_CACHE, UNSET"}
	c, err := sim.ParseArgs(strings.Fields("--model-path /m --port 8001 --host 127.0.0.1 -tp 4 --nnodes 4 --node-rank 2 --dist-init-addr 10.0.0.1:29500 --mem-fraction-static 0.88 --trust-remote-code --context-length 1024 --served-model-name org/m --prefill-tps 900"), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.ModelPath != "/m" || c.Port != 8001 || c.TP != 4 || c.NNodes != 4 || c.NodeRank != 2 || c.DistInitAddr != "10.0.0.1:29500" ||
		c.ContextLength != 1024 || c.ServedModelName != "org/m" || c.PrefillTPS != 900 || c.DecodeTPS != 33 || c.EngramDir != "/engram" ||
		c.HFHubCache != "/hub" || len(c.EngramRows) != 2 || c.EngramRows[1] != 12 {
		t.Errorf("sglang-style args: %+v", c)
	}
	if strings.Join(c.Ignored, "|") != "--mem-fraction-static 0.88|--trust-remote-code" {
		t.Errorf("ignored flags %q", c.Ignored)
	}
	if strings.Join(c.LogEnv, "|") != "HF_HUB_CACHE=/hub|UNSET=" {
		t.Errorf("env lines to log %q", c.LogEnv)
	}
	c, err = sim.ParseArgs(strings.Fields("serve /m --tensor-parallel-size 2 --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29501 --headless --max-model-len 2048 --decode-tps 12 --engram-env MY_DIR --fail-at join"), func(k string) string {
		return map[string]string{"MY_DIR": "/mine", "SPARK_ENGRAM_DIR": "/not-this"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.ModelPath != "/m" || c.TP != 2 || c.DistInitAddr != "10.0.0.1:29501" || !c.Headless || c.ContextLength != 2048 || c.DecodeTPS != 12 || c.EngramDir != "/mine" || c.FailAt != "join" {
		t.Errorf("vllm-style args: %+v", c)
	}
	// A recipe command starting with the binary, passed as entrypoint args.
	c, err = sim.ParseArgs(strings.Fields("/engine-sim /hub --served-model-name org/m"), func(string) string { return "" })
	if err != nil || c.ModelPath != "/hub" || len(c.Ignored) != 0 || c.Port != 8000 {
		t.Errorf("command with the binary's own name: %+v %v", c, err)
	}
	if _, err := sim.ParseArgs([]string{"--port", "x"}, func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "--port") {
		t.Errorf("bad --port: %v", err)
	}
}

func TestFailAtPhases(t *testing.T) {
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	for _, phase := range []string{sim.FailLoad, sim.FailJoin} {
		err := runErr(t, sim.Config{ModelPath: model, FailAt: phase})
		if err == nil || !strings.Contains(err.Error(), "--fail-at "+phase) {
			t.Errorf("--fail-at %s: %v", phase, err)
		}
	}
	// serve: answers once, then exits non-zero.
	e := simtest.Start(t, sim.Config{ModelPath: model, FailAt: sim.FailServe})
	e.WaitServing(t, 10*time.Second)
	resp, err := http.Get(e.URL + "/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first answer under --fail-at serve: %v %v", resp, err)
	}
	resp.Body.Close()
	wantExit(t, e, "--fail-at serve", "--fail-at serve")
}

// TestBinaryOneLineError runs the real engine-sim binary on a corrupt tree:
// exit status 1 and exactly one stderr line naming the file.
func TestBinaryOneLineError(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(t.TempDir(), "engine-sim")
	build := exec.Command("go", "build", "-o", bin, "./engine-sim")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./engine-sim: %v\n%s", err, out)
	}
	model := simtest.WriteModel(t, t.TempDir(), simtest.Model{})
	shard := filepath.Join(model, "model-00001-of-00002.safetensors")
	os.WriteFile(shard, []byte("12345678{not json"), 0o644)
	cmd := exec.Command(bin, model, "--port", fmt.Sprint(simtest.FreePort(t)), "--mem-fraction-static", "0.9")
	var stderr, stdout bytes.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, &stdout
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("engine-sim on a corrupt tree: %v, want a non-zero exit", err)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], shard) {
		t.Errorf("stderr %q: want one line naming %s", stderr.String(), shard)
	}
	if !strings.Contains(stdout.String(), "ignoring engine flag --mem-fraction-static 0.9") {
		t.Errorf("ignored flag not logged: %q", stdout.String())
	}
}
