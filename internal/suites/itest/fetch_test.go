package itest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
	"github.com/sparklane/sparklane/workflows"
)

// fetchRecipe is a one-node sim lane with one hub-mirror block of repo
// from the NAS hub root hub (extra: more keys of the block).
func fetchRecipe(name, hub, repo, extra string) string {
	return fmt.Sprintf(`name = %q
cluster = "one"
runtime = "sim"
image = "sparklane/engine-sim:latest"
model = %q
command = "/engine-sim /hub --port {port}"

[[staging]]
kind = "hub-mirror"
id = "weights"
src = %q
dst = "/srv/%s"
repos = [%q]
verify = "sampled"
%s`, name, repo, hub, name, repo, extra)
}

// hubFiles is a small repo: git files and LFS files (threshold 64 KiB),
// nested paths, and a subtree the lane skips.
func hubFiles(t *testing.T) map[string][]byte {
	t.Helper()
	rnd := func(n int) []byte {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	return map[string][]byte{
		"config.json":                      []byte(`{"architectures": ["SimLM"]}`),
		"tokenizer.json":                   rnd(40 << 10),
		"model-00001-of-00002.safetensors": rnd(3<<20 + 17),
		"model-00002-of-00002.safetensors": rnd(1 << 20),
		"nested/deeper/extra.bin":          rnd(200 << 10),
		"original/consolidated.pth":        rnd(2 << 20),
	}
}

func hubtestFiles(m map[string][]byte) []hubtest.File {
	var out []hubtest.File
	for _, p := range sortedKeys(m) {
		out = append(out, hubtest.File{Path: p, Data: m[p]})
	}
	return out
}

// checkHubTree checks repo at commit in the hub cache dir hub: refs/ref
// holds the commit, every file not under skip is a relative symlink
// snapshots/COMMIT/PATH -> ../../blobs/ETAG (one more ../ per directory)
// whose bytes are the served ones, skipped files are absent, and no
// *.incomplete is left.
func checkHubTree(t *testing.T, s *hubtest.Server, hub, repo, commit, ref, skip string, want map[string][]byte) {
	t.Helper()
	dir := filepath.Join(hub, "models--"+strings.ReplaceAll(repo, "/", "--"))
	if ref != "" {
		if b, err := os.ReadFile(filepath.Join(dir, "refs", ref)); err != nil || string(b) != commit {
			t.Errorf("refs/%s = %q, %v; want %s", ref, b, err, commit)
		}
	}
	for p, data := range want {
		link := filepath.Join(dir, "snapshots", commit, filepath.FromSlash(p))
		if skip != "" && strings.HasPrefix(p, skip) {
			if _, err := os.Lstat(link); err == nil {
				t.Errorf("%s is skipped by the block but was fetched", p)
			}
			continue
		}
		target, err := os.Readlink(link)
		if err != nil {
			t.Errorf("snapshot entry %s: %v", p, err)
			continue
		}
		wantTarget := strings.Repeat("../", strings.Count(p, "/")+2) + "blobs/" + s.ETag(repo, p)
		if target != wantTarget {
			t.Errorf("%s -> %s, want the relative %s", p, target, wantTarget)
		}
		got, err := os.ReadFile(link)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes (%v), not the %d served", p, len(got), err, len(data))
		}
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".incomplete") {
			t.Errorf("left behind: %s", p)
		}
		return nil
	})
}

// `starter fetch` downloads a lane's repo from the Hub double into the
// NAS in the Hub's cache layout (byte-identical, refs/main, relative
// links), never asks for what the block skips, and its dry run lists what
// it would fetch; `stage --fetch` of a lane whose repo is not on the NAS
// fetches it, then stages it (no SourceIncomplete).
func TestStarterFetchAndStageFetch(t *testing.T) {
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	files, other := hubFiles(t), hubFiles(t)
	sha := s.AddRepo(hubtest.Repo{ID: "org/fetched", LFSThreshold: 64 << 10, Files: hubtestFiles(files)})
	otherSHA := s.AddRepo(hubtest.Repo{ID: "org/absent", LFSThreshold: 64 << 10, Files: hubtestFiles(other)})
	corrupt := hubFiles(t)
	s.AddRepo(hubtest.Repo{ID: "org/corrupt", LFSThreshold: 64 << 10, Files: hubtestFiles(corrupt)})
	s.Corrupt("org/corrupt", "model-00002-of-00002.safetensors", 12345)
	const secret = "hf_itest_secret_token"
	s.AddRepo(hubtest.Repo{ID: "org/private", Token: secret, Files: []hubtest.File{{Path: "config.json", Data: []byte(`{"private": true}`)}}})
	dir := t.TempDir()
	hub := filepath.Join(dir, "nas", "hub")
	tokenFile := filepath.Join(dir, "hf-token")
	if err := os.WriteFile(tokenFile, []byte("hf_wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFleet(t, fleetOptions{nodes: 1, clusters: map[string][]string{"one": {"n1"}}, shared: filepath.Join(dir, "nas"),
		extra: fmt.Sprintf("hf_endpoint = %q\nhf_token_file = %q\n", s.URL, tokenFile),
		recipes: map[string]string{
			"fetched": fetchRecipe("fetched", hub, "org/fetched", "skip = [\"original/**\"]\nrevision = \"main\"\n"),
			"absent":  fetchRecipe("absent", hub, "org/absent", fmt.Sprintf("revision = %q\n", otherSHA)),
			"private": fetchRecipe("private", hub, "org/private", ""),
			"corrupt": fetchRecipe("corrupt", hub, "org/corrupt", ""),
		}})
	f.startControl()
	f.startNode("n1")
	ctx := withTimeout(t, 5*time.Minute)

	code, out, errOut := f.starter(ctx, "fetch", "--lane", "fetched", "--dry-run")
	if code != 0 || !strings.Contains(out, "org/fetched") || !strings.Contains(out, sha[:12]) || !strings.Contains(out, "dry run") {
		t.Fatalf("fetch --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(hub, "models--org--fetched")); err == nil {
		t.Fatal("the dry run wrote into the NAS")
	}
	s.ResetLog()
	code, out, errOut = f.starter(ctx, "fetch", "--lane", "fetched")
	if code != 0 {
		t.Fatalf("starter fetch: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("starter fetch:\n%s", out)
	checkHubTree(t, s, hub, "org/fetched", sha, "main", "original/", files)
	for _, r := range s.Requests() {
		if strings.Contains(r.Path, "original/") {
			t.Errorf("a skipped file was requested: %s %s", r.Method, r.Path)
		}
	}
	saveHistory(t, f, contract.FetchID("fetched"), "fetch-ok")
	if code, out, errOut = f.starter(ctx, "attach", contract.FetchID("fetched")); code != 0 || !strings.Contains(out, "already ended") || !strings.Contains(out, "org/fetched") {
		t.Errorf("attach fetch/fetched: exit %d\n%s%s", code, out, errOut)
	}

	// The repo of lane absent is not on the NAS: staging alone refuses.
	code, out, errOut = f.starter(ctx, "stage", "--lane", "absent")
	if code == 0 {
		t.Fatalf("stage of a lane whose repo is absent from the NAS succeeded:\n%s%s", out, errOut)
	}
	_, out, errOut = f.starter(ctx, "stage", "--lane", "absent", "--fetch", "--dry-run")
	if !strings.Contains(out, "fetch org/absent@"+otherSHA+" from the Hub into "+hub+" on control") {
		t.Fatalf("stage --fetch --dry-run does not say it fetches first:\n%s%s", out, errOut)
	}
	if _, err := os.Stat(filepath.Join(hub, "models--org--absent")); err == nil {
		t.Fatal("stage --fetch --dry-run fetched")
	}
	code, out, errOut = f.starter(ctx, "stage", "--lane", "absent", "--fetch")
	if code != 0 || strings.Contains(out+errOut, "SourceIncomplete") {
		t.Fatalf("stage --fetch: exit %d\n%s%s", code, out, errOut)
	}
	checkHubTree(t, s, hub, "org/absent", otherSHA, "", "", other)
	staged := filepath.Join(f.dir, "nodes", "n1", "srv", "absent", "hub", "models--org--absent", "snapshots", otherSHA, "config.json")
	if b, err := os.ReadFile(staged); err != nil || !bytes.Equal(b, other["config.json"]) {
		t.Fatalf("staged %s: %q, %v", staged, b, err)
	}
	saveHistory(t, f, contract.StageID("absent"), "stage-fetch")

	// A byte corrupted in transit: refused at once, naming the file, and
	// nothing of it under blobs/ (the other files are kept).
	code, out, errOut = f.starter(ctx, "fetch", "--lane", "corrupt")
	if code != 1 || !strings.Contains(errOut, "model-00002-of-00002.safetensors") || !strings.Contains(errOut, "the Hub announces") {
		t.Fatalf("fetch of a corrupted file: exit %d, want 1 naming the file\n%s%s", code, out, errOut)
	}
	if n := activityAttemptsOf(t, f, contract.FetchID("corrupt"), "FetchRepo"); n != 1 {
		t.Errorf("a content mismatch was tried %d times: it is permanent", n)
	}
	bad := filepath.Join(hub, "models--org--corrupt", "blobs", s.ETag("org/corrupt", "model-00002-of-00002.safetensors"))
	if m, _ := filepath.Glob(bad + "*"); len(m) != 0 {
		t.Errorf("the corrupted file left %v under blobs/", m)
	}

	// A private repo: the worker reads hf_token_file; a wrong token is a
	// permanent HubUnauthorized naming the repo and the fix, the right one
	// fetches, and the token is nowhere in the run's history.
	code, out, errOut = f.starter(ctx, "fetch", "--lane", "private")
	if code != 1 || !strings.Contains(errOut, "org/private") || !strings.Contains(errOut, "unauthorized") || !strings.Contains(errOut, tokenFile) {
		t.Fatalf("fetch with a wrong token: exit %d, want 1 naming the repo, the refusal and the token file\n%s%s", code, out, errOut)
	}
	if n := activityAttemptsOf(t, f, contract.FetchID("private"), "FetchRepo"); n != 1 {
		t.Errorf("a 401 was tried %d times: it is permanent", n)
	}
	if err := os.WriteFile(tokenFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut = f.starter(ctx, "fetch", "--lane", "private"); code != 0 {
		t.Fatalf("fetch with the token file: exit %d\n%s%s", code, out, errOut)
	}
	if h := historyText(t, f, contract.FetchID("private")); strings.Contains(h, secret) || !strings.Contains(h, tokenFile) {
		t.Errorf("the history of fetch/private holds the token (or not the token file's path)")
	}
}

// waitFetchMarker waits for the test worker's fetch fault point to write
// its marker (the fetch now blocks there) and returns the byte count it
// reached.
func waitFetchMarker(ctx context.Context, t *testing.T, p *nodeProc, marker string) int64 {
	t.Helper()
	for {
		n, ok, err := testworker.ReadMarker(marker)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return n
		}
		select {
		case <-ctx.Done():
			logb, _ := os.ReadFile(p.log)
			t.Fatalf("the fetch never reached its fault point (no %s): %v\n%s", marker, ctx.Err(), logb)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// activityAttemptsOf is how many times activities of type name started in
// the workflow's latest run (retries included).
func activityAttemptsOf(t *testing.T, f *fleet, id, name string) int {
	t.Helper()
	var n int32
	for _, a := range activityAttempts(context.Background(), t, f.env.Client, id, name) {
		n = max(n, a)
	}
	return int(n)
}

// historyText is the workflow's latest history as text, payloads (JSON)
// as written.
func historyText(t *testing.T, f *fleet, id string) string {
	t.Helper()
	it := f.env.Client.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var b strings.Builder
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(e.String())
	}
	return b.String()
}

// kill -9 of the fetch node's worker at half a large file (the test
// worker's fetch fault point at a byte count, no sleeps: the fetch blocks
// there and says so in a marker file, and the test sends SIGKILL): after a
// restart the retried FetchRepo resumes from the partial file on the NAS,
// the tree is complete, and the Hub double served at most one chunk more
// than the repo holds.
func TestFetchWorkerKill9MidFileResumes(t *testing.T) {
	const size = 256 << 20
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	sha := s.AddRepo(hubtest.Repo{ID: "org/big", Files: []hubtest.File{
		{Path: "config.json", Data: []byte(`{"big": true}`)},
		{Path: "model.safetensors", Size: size, Seed: 11, LFS: true},
	}})
	base := t.TempDir()
	built := buildWorker(t, base)
	hub := filepath.Join(base, "nas", "hub")
	f := newFleet(t, fleetOptions{nodes: 1, clusters: map[string][]string{"one": {"n1"}}, shared: filepath.Join(base, "nas"),
		extra:   fmt.Sprintf("hf_endpoint = %q\nfetch_node = \"n1\"\n", s.URL),
		recipes: map[string]string{"big": fetchRecipe("big", hub, "org/big", "")}})
	f.startControl()
	marker := filepath.Join(base, "fetch-marker")
	p := &nodeProc{t: t, bin: built(), cfg: f.cfgFile, node: "n1", log: filepath.Join(base, "worker-n1.log"),
		env: []string{fmt.Sprintf("%s=%d", testworker.FetchHoldAtEnv, size/2), testworker.FetchMarkerEnv + "=" + marker}}
	t.Cleanup(p.stop)
	p.start()
	ctx := withTimeout(t, 5*time.Minute)

	r, _ := f.lanePlan("big")
	fp, err := lane.FetchPlan(f.cfg, r, lane.FetchOptions{})
	if err != nil || fp == nil || fp.Node != "n1" {
		t.Fatalf("fetch plan %+v, %v", fp, err)
	}
	run, err := f.env.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: contract.FetchID("big"), TaskQueue: contract.ControlQueue},
		workflows.Fetch, contract.FetchInput{Plan: *fp, Heartbeat: contract.Duration(killHeartbeat)})
	if err != nil {
		t.Fatal(err)
	}
	// The worker's fetch holds at the fault point and says so; the test
	// kills it there.
	held := waitFetchMarker(ctx, t, p, marker)
	p.kill9()
	if held < size/2 {
		t.Fatalf("the fetch fault point fired at %d bytes downloaded, before %d", held, size/2)
	}
	atKill := s.Served("org/big", "model.safetensors")
	var partial int64
	filepath.WalkDir(hub, func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".incomplete") {
			if fi, err := d.Info(); err == nil {
				partial = fi.Size()
			}
		}
		return nil
	})
	if atKill < size/2 || partial == 0 {
		t.Fatalf("killed after %d bytes served with a %d-byte partial file: not mid-file", atKill, partial)
	}
	p.env = nil
	p.start()
	var res contract.FetchResult
	if err := run.Get(ctx, &res); err != nil {
		logb, _ := os.ReadFile(p.log)
		t.Fatalf("fetch after kill -9 and restart: %v\n%s", err, logb)
	}
	served := s.Served("org/big", "model.safetensors")
	t.Logf("killed with %d of %d bytes served; %d served in all; the retry downloaded %d, resumed %d", atKill, size, served, res.Repos[0].DownloadedBytes, res.Repos[0].ResumedBytes)
	if served > size+64<<20 {
		t.Errorf("the double served %d bytes of a %d-byte file: more than one extra 64 MiB chunk after the kill", served, size)
	}
	if res.Repos[0].ResumedBytes == 0 {
		t.Error("the retry resumed nothing from the partial file")
	}
	dir := filepath.Join(hub, "models--org--big")
	link := filepath.Join(dir, "snapshots", sha, "model.safetensors")
	if fi, err := os.Stat(link); err != nil || fi.Size() != size {
		t.Fatalf("%s: %v, %v", link, fi, err)
	}
	if target, _ := os.Readlink(link); target != "../../blobs/"+s.ETag("org/big", "model.safetensors") {
		t.Errorf("link -> %s", target)
	}
	logb, _ := os.ReadFile(p.log)
	if !strings.Contains(string(logb), "resuming fetch") {
		t.Errorf("the restarted worker did not say it resumed (log %s)", p.log)
	}
	// A second fetch of the complete repo downloads nothing.
	before := s.TotalServed()
	code, out, errOut := f.starter(ctx, "fetch", "--lane", "big", "--json")
	var again struct {
		Node  string
		Repos []contract.FetchRepoResult
	}
	if code != 0 || json.Unmarshal([]byte(out), &again) != nil || len(again.Repos) != 1 || again.Node != "n1" {
		t.Fatalf("starter fetch again: exit %d\n%s%s", code, out, errOut)
	}
	if r := again.Repos[0]; r.DownloadedBytes != 0 || r.ReusedFiles != 2 || s.TotalServed() != before {
		t.Errorf("a fetch of the complete repo downloaded %d bytes (reused %d blobs, %d served)", r.DownloadedBytes, r.ReusedFiles, s.TotalServed()-before)
	}
}

// cutover --fetch of a demo lane whose model repo is not on the NAS: the
// Fetch child downloads it from the Hub double first, then the cutover
// stages, verifies and serves it.
func TestCutoverFetchOfAnAbsentRepo(t *testing.T) {
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	f, _ := demoFleet(t, 24<<20, func(o *fleetOptions) { o.extra += fmt.Sprintf("hf_endpoint = %q\n", s.URL) })
	ctx := withTimeout(t, 10*time.Minute)
	hub := f.cfg.HFCacheDir
	repoDir := demo.RepoDir(hub, demo.ModelRepo)
	snap := filepath.Join(repoDir, "snapshots", demo.Revision)
	files := map[string][]byte{}
	err := filepath.WalkDir(snap, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(snap, p)
		files[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil || len(files) == 0 {
		t.Fatalf("read the demo model's snapshot: %v (%d files)", err, len(files))
	}
	sha := s.AddRepo(hubtest.Repo{ID: demo.ModelRepo, Files: hubtestFiles(files)})
	if err := os.RemoveAll(repoDir); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := f.starter(ctx, "cutover", "--lane", "demo-2x", "--fetch")
	if code != 0 {
		t.Fatalf("cutover --fetch: exit %d\n%s%s", code, out, errOut)
	}
	checkHubTree(t, s, hub, demo.ModelRepo, sha, "main", "", files)
	saveHistory(t, f, contract.CutoverID("demo-2x"), "cutover-fetch")
	if code, out, errOut := f.starter(ctx, "stop", "--lane", "demo-2x"); code != 0 {
		t.Errorf("stop: exit %d\n%s%s", code, out, errOut)
	}
}
