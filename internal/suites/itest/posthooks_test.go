package itest

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/sparklane/sparklane/internal/contract"
)

// postHookLane writes recipe NAME (demo-2x's, on cluster demo-2x) with the
// top-level keys extra (post hooks) and [defaults] keys defaults added.
func postHookLane(t *testing.T, f *fleet, name, extra, defaults string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "recipes", "demo-2x.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), `name = "demo-2x"`, `name = "`+name+`"`, 1)
	s = strings.Replace(s, `aliases = ["d2"]`, `aliases = []`, 1)
	s = strings.Replace(s, "\n[defaults]\n", "\n"+extra+"\n[defaults]\n"+defaults, 1)
	if err := os.WriteFile(filepath.Join(f.dir, "recipes", name+".toml"), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// containerFile reads path from a container (docker cp).
func containerFile(t *testing.T, dc *dockerclient.Client, ctr, path string) string {
	t.Helper()
	rc, _, err := dc.CopyFromContainer(context.Background(), ctr, path)
	if err != nil {
		t.Fatalf("read %s in container %s: %v", path, ctr, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sparkrun's post hooks on real containers: post_exec writes a file
// inside the head container once the lane answers and post_commands one on
// the control host, both with the hook placeholders filled; their outputs
// are in the run's result. A failing post_exec fails the serve step and
// rolls back to the previous lane. stop_after_post leaves no container.
func TestPostHooksRunAndStopAfterPost(t *testing.T) {
	f, dc := demoFleet(t, 8<<20)
	t.Cleanup(func() { removeLaneContainers(dc, "hooks-2x", "once-2x") })
	mark := filepath.Join(f.dir, "control-mark")
	// served is hostile (issue 52): the hooks print it, never run it.
	pwned := filepath.Join(f.dir, "pwned")
	served := "x$(touch " + pwned + ")$(touch /pwned)'\"`touch /pwned`"
	postHookLane(t, f, "hooks-2x",
		`post_exec = ["echo ready {model} {port} {container_name} > /post-exec-mark", "exit {post_rc}", "printf '%s\\n' {served} \"{served}\" > /served"]
post_commands = ["echo {base_url} {head_ip} {cluster_id} {cache_dir} $SPARKLANE_LANE > `+mark+`", "printf '%s\\n' {served} '{served}' > `+mark+`.served"]
`, "post_rc = 0\nserved = '''"+served+"'''\n")
	postHookLane(t, f, "once-2x", `post_commands = ["echo once > `+mark+`.once"]
stop_after_post = true
`, "")
	f.reload()
	ctx := withTimeout(t, 10*time.Minute)

	// --dry-run lists them, rendered.
	code, out, errOut := f.starter(ctx, "cutover", "--lane", "hooks-2x", "--dry-run")
	if code != 0 || !strings.Contains(out, "post_exec[0] in "+contract.ContainerName("hooks-2x", 0)+" on n1: echo ready") ||
		!strings.Contains(out, "post_commands[0] on the control host: echo http://127.0.0.1:") {
		t.Fatalf("cutover --dry-run: exit %d\n%s\n%s", code, out, errOut)
	}

	code, res, errOut := cutover(t, f, "--lane", "demo-2x")
	if code != 0 || !res.OK {
		t.Fatalf("cutover demo-2x: exit %d %+v\n%s", code, res, errOut)
	}
	// A post_exec that exits 3: the serve step fails, demo-2x comes back.
	code, res, errOut = cutover(t, f, "--lane", "hooks-2x", "--stage=skip", "-o", "post_rc=3")
	if code == 0 || res.OK || res.FailedStep != "serve" || !strings.Contains(res.Error, "post_exec 2 (\"exit 3\")") ||
		!strings.Contains(res.Error, "exited 3") || !res.OldLaneAnswers || len(res.RolledBack) != 1 {
		t.Fatalf("failing post_exec: exit %d, failed at %q: %s; rolled back %v, old lane answers %v\n%s", code, res.FailedStep, res.Error, res.RolledBack, res.OldLaneAnswers, errOut)
	}
	saveHistory(t, f, contract.CutoverID("demo-2x"), "cutover-post-exec-failed")
	if !strings.Contains(errOut+res.Error, "post_exec") {
		t.Errorf("the failure does not name post_exec: %s", errOut)
	}
	if r, all := laneContainers(t, dc, "hooks-2x"); all != 0 {
		t.Errorf("hooks-2x left %d containers (%d running) after its rollback", all, r)
	}

	code, res, errOut = cutover(t, f, "--lane", "hooks-2x", "--stage=skip")
	if code != 0 || !res.OK || res.Serve == nil || res.Serve.PostExec == nil || res.Serve.PostCommands == nil {
		t.Fatalf("cutover hooks-2x: exit %d %+v\n%s", code, res, errOut)
	}
	saveHistory(t, f, contract.CutoverID("demo-2x"), "cutover-post-hooks")
	if n := len(res.Serve.PostExec.Outputs); n != 3 || res.Serve.PostExec.Node != "n1" {
		t.Errorf("post_exec outputs: %+v", res.Serve.PostExec)
	}
	port := res.Serve.BaseURL[strings.LastIndex(res.Serve.BaseURL, ":")+1:]
	port = strings.TrimSuffix(strings.TrimSuffix(port, "/v1"), "/")
	ctr := contract.ContainerName("hooks-2x", 0)
	if got := containerFile(t, dc, ctr, "/post-exec-mark"); !strings.HasPrefix(got, "ready ") || !strings.Contains(got, " "+port+" "+ctr) {
		t.Errorf("the file post_exec wrote in %s: %q (want ready MODEL %s %s)", ctr, got, port, ctr)
	}
	b, err := os.ReadFile(mark)
	want := "http://127.0.0.1:" + port + "/v1 127.0.0.1 demo-2x " + f.cfg.HFCacheDir + " hooks-2x\n"
	if err != nil || string(b) != want {
		t.Errorf("the file post_commands wrote on the control host: %q, %v; want %q", b, err, want)
	}
	if got := containerFile(t, dc, ctr, "/served"); got != served+"\n"+served+"\n" {
		t.Errorf("post_exec printed the hostile value as %q, want it twice as written: %q", got, served)
	}
	if b, err := os.ReadFile(mark + ".served"); err != nil || string(b) != served+"\n"+served+"\n" {
		t.Errorf("post_commands printed the hostile value as %q (%v), want it twice as written: %q", b, err, served)
	}
	if _, err := os.Lstat(pwned); err == nil {
		t.Errorf("a post hook ran a placeholder value as shell on the control host: %s exists", pwned)
	}
	if _, err := dc.ContainerStatPath(ctx, ctr, "/pwned"); err == nil {
		t.Errorf("post_exec ran a placeholder value as shell in %s: /pwned exists", ctr)
	}
	if r, _ := laneContainers(t, dc, "hooks-2x"); r != 2 {
		t.Errorf("hooks-2x: %d containers running after its post hooks, want 2", r)
	}

	// stop_after_post: the hooks run, then the lane is stopped.
	code, res, errOut = cutover(t, f, "--lane", "once-2x", "--stage=skip")
	if code != 0 || !res.OK || res.Serve == nil || !res.Serve.StoppedAfterPost {
		t.Fatalf("cutover once-2x: exit %d %+v\n%s", code, res, errOut)
	}
	if b, err := os.ReadFile(mark + ".once"); err != nil || string(b) != "once\n" {
		t.Errorf("post_commands of once-2x: %q, %v", b, err)
	}
	if r, all := laneContainers(t, dc, "once-2x"); all != 0 {
		t.Errorf("stop_after_post left %d containers (%d running)", all, r)
	}
}
