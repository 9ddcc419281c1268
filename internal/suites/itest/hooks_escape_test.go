package itest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/serve"
)

// demo2xRenamed reads f's demo-2x recipe and returns it as read and as
// text renamed name, with no aliases.
func demo2xRenamed(t *testing.T, f *fleet, name string) ([]byte, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "recipes", "demo-2x.toml"))
	if err != nil {
		t.Fatal(err)
	}
	r := regexp.MustCompile(`(?m)^name = .*$`).ReplaceAllString(string(b), "name = \""+name+"\"")
	r = regexp.MustCompile(`(?m)^aliases = .*$`).ReplaceAllString(r, "aliases = []")
	return b, r
}

// hookLane writes a recipe NAME on the demo's 2-node cluster (a copy of
// demo-2x: same image, staging and engine) whose [hooks] table is hooks.
func hookLane(t *testing.T, f *fleet, name, hooks string) {
	t.Helper()
	b, r := demo2xRenamed(t, f, name)
	table := regexp.MustCompile(`(?m)^\[hooks\]\n(?:[a-z_]+ = .*\n)*`)
	if !table.MatchString(r) || !strings.Contains(r, "[[staging]]") {
		t.Fatalf("demo-2x recipe changed shape (no [hooks] table to replace):\n%s", b)
	}
	r = table.ReplaceAllLiteralString(r, "[hooks]\n"+hooks+"\n")
	if err := os.WriteFile(filepath.Join(f.dir, "recipes", name+".toml"), []byte(r), 0o644); err != nil {
		t.Fatal(err)
	}
	f.reload()
}

// nodeRoot is node n's fs_root.
func (f *fleet) nodeRoot(n string) string { return filepath.Join(f.dir, "nodes", n) }

// hookFailure finds, in the cutover's history, the failed BeforeServe
// activity and returns its failure type and whether it was non-retryable.
func hookFailure(ctx context.Context, t *testing.T, f *fleet, id string) (typ string, nonRetryable bool, msg string) {
	t.Helper()
	scheduled := map[int64]string{}
	for _, ev := range historyEvents(ctx, t, f.env.Client, id) {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduled[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskFailedEventAttributes(); a != nil && scheduled[a.GetScheduledEventId()] == "BeforeServe" {
			info := a.GetFailure().GetApplicationFailureInfo()
			return info.GetType(), info.GetNonRetryable(), a.GetFailure().GetMessage()
		}
	}
	return "", false, ""
}

// A hook path that walks through a symlink out of the node's root fails
// the cutover at the hook step with the typed, non-retryable ClearRefused
// error, starts no container, and leaves the link's target outside the
// root as it was. (A root itself, or an ancestor of staged data, is refused
// the same way: internal/engine/serve's tests; recipe check refuses them before
// any run.)
func TestCutoverHookClearEscapeIsRefused(t *testing.T) {
	f, dc := demoFleet(t, 24<<20)
	t.Cleanup(func() { removeLaneContainers(dc, "escape-2x") })
	outside := filepath.Join(f.dir, "outside-etc")
	if err := os.MkdirAll(filepath.Join(outside, "receipts"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"receipts/keep": "precious", "passwd": "root:x:0:0"} {
		if err := os.WriteFile(filepath.Join(outside, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"n1", "n2"} {
		state := filepath.Join(f.nodeRoot(n), "srv", "sparklane", "state")
		if err := os.MkdirAll(state, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(state, "link")); err != nil {
			t.Fatal(err)
		}
	}
	hookLane(t, f, "escape-2x", `clear = ["/srv/sparklane/state/link/receipts"]`)
	ctx := withTimeout(t, 10*time.Minute)

	code, res, errOut := cutover(t, f, "--lane", "escape-2x")
	if code == 0 || res.OK {
		t.Fatalf("cutover through a symlinked clear path succeeded: exit %d\n%s", code, errOut)
	}
	if res.FailedStep != "serve" && res.FailedStep != "before_serve" {
		t.Errorf("failed step %q, want the hook step (serve / before_serve)", res.FailedStep)
	}
	var hookStep *contract.Step
	for i, s := range res.Steps {
		if s.Name == "before_serve" && s.Error != "" {
			hookStep = &res.Steps[i]
		}
	}
	if hookStep == nil {
		t.Errorf("no failed before_serve step in %+v", res.Steps)
	}
	for _, want := range []string{"srv/sparklane/state/link", "is a symlink", "never followed"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("cutover error does not say %q: %s", want, res.Error)
		}
	}
	typ, nonRetryable, msg := hookFailure(ctx, t, f, contract.CutoverID("demo-2x"))
	if typ != serve.ClearRefused || !nonRetryable {
		t.Errorf("BeforeServe failure in history: type %q non-retryable %v (%s); want non-retryable %s", typ, nonRetryable, msg, serve.ClearRefused)
	}
	if _, all := laneContainers(t, dc, "escape-2x"); all != 0 {
		t.Errorf("the refused cutover created %d containers", all)
	}
	got := map[string]string{}
	_ = filepath.Walk(outside, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(outside, p)
			got[rel] = string(b)
		}
		return nil
	})
	if len(got) != 2 || got["receipts/keep"] != "precious" || got["passwd"] != "root:x:0:0" {
		t.Errorf("the directory outside the root changed: %v", got)
	}
}

// A receipt root left by yesterday's run (root-owned files in it) is gone
// when the engine starts, on every cutover: the hook stands in for the EXL3
// kit's strict-on-exists writer (mkdir fails when the root exists), so the
// lane serves only if each clear removed the root, not emptied it.
func TestCutoverHookClearRemovesReceiptRoot(t *testing.T) {
	f, dc := demoFleet(t, 24<<20)
	t.Cleanup(func() { removeLaneContainers(dc, "receipts-2x") })
	const receipts = "/srv/sparklane/state/receipts"
	for _, n := range []string{"n1", "n2"} {
		dir := filepath.Join(f.nodeRoot(n), receipts, "run-yesterday")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		old := filepath.Join(dir, "rank.done")
		if err := os.WriteFile(old, []byte("yesterday"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(old, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	hookLane(t, f, "receipts-2x", `clear = ["`+receipts+`"]
before_serve = ["R=\"$SPARKLANE_FS_ROOT`+receipts+`\"; if [ -e \"$R\" ]; then echo \"FileExistsError: $R\"; exit 17; fi; mkdir \"$R\" && echo rank=$SPARKLANE_RANK > \"$R/rank.done\" && echo receipt root created"]`)

	for run := 1; run <= 2; run++ {
		code, res, errOut := cutover(t, f, "--lane", "receipts-2x")
		if code != 0 || !res.OK {
			t.Fatalf("cutover %d: exit %d, failed at %q: %s\n%s", run, code, res.FailedStep, res.Error, errOut)
		}
		if res.Serve == nil || !res.Serve.Answers || len(res.Serve.Hooks) != 2 {
			t.Fatalf("cutover %d: serve %+v", run, res.Serve)
		}
		for _, h := range res.Serve.Hooks {
			if len(h.Outputs) != 1 || h.Outputs[0].Exit != 0 || !strings.Contains(h.Outputs[0].Output, "receipt root created") {
				t.Errorf("cutover %d, node %s: hook %+v", run, h.Node, h.Outputs)
			}
		}
		for i, n := range []string{"n1", "n2"} {
			dir := filepath.Join(f.nodeRoot(n), receipts)
			ents, err := os.ReadDir(dir)
			if err != nil || len(ents) != 1 || ents[0].Name() != "rank.done" {
				t.Errorf("cutover %d, node %s: receipt root holds %v (%v); want only this run's rank.done", run, n, ents, err)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "rank.done")); string(b) != "rank="+string(rune('0'+i))+"\n" {
				t.Errorf("cutover %d, node %s: rank.done = %q", run, n, b)
			}
		}
	}
}
