package images

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// writeContext makes a from-scratch build context under a shared root:
// a Dockerfile (FROM scratch, COPY of a file, an ARG baked into a label)
// and the file.
func writeContext(t *testing.T, df string) (root, dir string) {
	t.Helper()
	root = t.TempDir()
	dir = filepath.Join(root, "engines", "e1")
	if err := os.MkdirAll(filepath.Join(dir, "docker"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "docker", "Dockerfile"), []byte(df), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "payload"), []byte("engine "+randHex(8)), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, dir
}

// A [build] from a context on a shared root, on real Docker: the image is
// tagged as the recipe's, its build args applied and its log streamed; a
// failing step fails permanently with the build's last lines; a symlink in
// the context and a context off the shared roots are refused before the
// daemon sees anything.
func TestBuildFromASharedContext(t *testing.T) {
	d := dockerClient(t)
	ctx := context.Background()
	root, dir := writeContext(t, "FROM scratch\nARG FLAVOUR\nLABEL flavour=$FLAVOUR\nCOPY payload /payload\n")
	tag := "sparklane-test/build:" + randHex(4)
	t.Cleanup(func() { removeImage(d, tag) })
	var lines []string
	b := contract.Build{Context: dir, Dockerfile: "docker/Dockerfile", Args: map[string]string{"FLAVOUR": "spark"}}
	got, err := Build(ctx, d, "h1", tag, b, []string{root}, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	ins, err := d.ImageInspect(ctx, tag)
	if err != nil || ins.ID != got.ID || ins.Config == nil || ins.Config.Labels["flavour"] != "spark" {
		t.Fatalf("built %s: %+v, inspect %v %v, want the tagged image with label flavour=spark", tag, got, ins.ID, err)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "COPY payload /payload") {
		t.Errorf("build log %q does not show the COPY step", lines)
	}

	// A failing step: the error is permanent and carries the last lines.
	_, bad := writeContext(t, "FROM scratch\nCOPY payload /payload\nCOPY missing-file /x\n")
	badRoot := filepath.Dir(filepath.Dir(bad))
	_, err = Build(ctx, d, "h1", tag+"-bad", contract.Build{Context: bad, Dockerfile: "docker/Dockerfile"}, []string{badRoot}, nil)
	if typ, _ := fault.TypeOf(err); typ != BuildFailed || !strings.Contains(err.Error(), "missing-file") || !strings.Contains(err.Error(), "last lines:") || !strings.Contains(err.Error(), "node h1") {
		t.Errorf("failing build: %v (%s), want BuildFailed naming the node, the failing step and the last lines", err, typ)
	}

	// A symlink in the context is refused (it may point anywhere).
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")); err != nil {
		t.Fatal(err)
	}
	_, err = Build(ctx, d, "h1", tag+"-link", b, []string{root}, nil)
	if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec || !strings.Contains(err.Error(), "symlink") || !strings.Contains(err.Error(), "passwd") {
		t.Errorf("context with a symlink: %v (%s), want InvalidSpec naming it", err, typ)
	}
	// Off the shared roots.
	_, err = Build(ctx, d, "h1", tag+"-off", b, []string{"/nas"}, nil)
	if err == nil || !strings.Contains(err.Error(), "under no shared root") {
		t.Errorf("context off the shared roots: %v", err)
	}
	if _, err := d.ImageInspect(ctx, tag+"-link"); err == nil {
		t.Error("a refused build left an image tagged")
	}
}

// gitServe makes a repository with real git (a from-scratch Dockerfile and
// a payload, committed on main and tagged v1) and serves it with a real
// `git daemon` on 127.0.0.1, in its own process group (it never holds a
// lock fd of the test's), stopped in t.Cleanup. It returns the repo's
// git:// URL.
func gitServe(t *testing.T, payload string) string {
	t.Helper()
	base := t.TempDir()
	repo := filepath.Join(base, "engine.git")
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t", "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	work := t.TempDir()
	git(work, "init", "-q", "-b", "main")
	for name, body := range map[string]string{"docker/Dockerfile": "FROM scratch\nCOPY payload /payload\n", "payload": payload} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(work, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(work, "add", ".")
	git(work, "commit", "-q", "-m", "engine")
	git(work, "tag", "v1")
	git(base, "clone", "-q", "--bare", work, repo)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	// A descriptor this process inherited (flock's lock fd) would be
	// inherited by the daemon too: close-on-exec for all of them.
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, e := range fds {
			if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
				syscall.CloseOnExec(fd)
			}
		}
	}
	d := exec.Command("git", "daemon", "--reuseaddr", "--export-all", "--informative-errors", "--base-path="+base, "--listen=127.0.0.1", fmt.Sprintf("--port=%d", port), base)
	d.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d.Stdin, d.Stdout, d.Stderr, d.ExtraFiles = nil, nil, nil, nil
	if err := d.Start(); err != nil {
		t.Fatalf("git daemon: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-d.Process.Pid, syscall.SIGKILL)
		_ = d.Wait()
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("git daemon on 127.0.0.1:%d: %v", port, err)
		}
	}
	return fmt.Sprintf("git://127.0.0.1:%d/engine.git", port)
}

// A [build] from a git URL, on real Docker and a real git daemon: the
// node's Docker clones the tag and builds; a ref the repository lacks is
// an InvalidSpec naming the ref key, a repository the server lacks a
// permanent failure naming the git key; neither leaves an image tagged.
func TestBuildFromAGitURL(t *testing.T) {
	d := dockerClient(t)
	ctx := context.Background()
	payload := "engine " + randHex(8)
	url := gitServe(t, payload)
	tag := "sparklane-test/git-build:" + randHex(4)
	t.Cleanup(func() { removeImage(d, tag); removeImage(d, tag+"-ref"); removeImage(d, tag+"-url") })

	b := contract.Build{Git: url, Ref: "v1", Dockerfile: "docker/Dockerfile"}
	got, err := Build(ctx, d, "h1", tag, b, nil, nil)
	if err != nil {
		t.Fatalf("build from %s at v1: %v", url, err)
	}
	ins, err := d.ImageInspect(ctx, tag)
	if err != nil || ins.ID != got.ID {
		t.Fatalf("built %s: %+v, inspect %s %v", tag, got, ins.ID, err)
	}
	// The same repository at its branch builds the same content.
	if _, err := Build(ctx, d, "h1", tag+"-main", contract.Build{Git: url, Ref: "main", Dockerfile: "docker/Dockerfile"}, nil, nil); err != nil {
		t.Errorf("build at branch main: %v", err)
	}
	removeImage(d, tag+"-main")

	_, err = Build(ctx, d, "h1", tag+"-ref", contract.Build{Git: url, Ref: "v9", Dockerfile: "docker/Dockerfile"}, nil, nil)
	if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec || !strings.Contains(err.Error(), `[build] ref "v9"`) || !strings.Contains(err.Error(), "node h1") {
		t.Errorf("a ref the repository lacks: %v (%s), want InvalidSpec naming [build] ref and the node", err, typ)
	}
	bad := strings.TrimSuffix(url, "engine.git") + "nosuch.git"
	_, err = Build(ctx, d, "h1", tag+"-url", contract.Build{Git: bad, Ref: "v1"}, nil, nil)
	if typ, _ := fault.TypeOf(err); typ != BuildFailed || !strings.Contains(err.Error(), "[build] git "+bad) {
		t.Errorf("a repository the server lacks: %v (%s), want BuildFailed naming [build] git", err, typ)
	}
	for _, ref := range []string{tag + "-ref", tag + "-url"} {
		if _, err := d.ImageInspect(ctx, ref); err == nil {
			t.Errorf("a failed git build left %s tagged", ref)
		}
	}
}
