package itest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/sparklane/sparklane/internal/simimage"
	"github.com/sparklane/sparklane/workflows"
)

// A lane whose image is on no node but whose recipe has [build]: the
// cutover's image step builds it on the head from a context on the shared
// root (engine-sim, FROM scratch, on this machine's real Docker), then the
// lane serves it. The dry run says so first; a failing build names its
// failing step. The cutover's history joins the corpus as cutover-build.
func TestCutoverBuildsAnImageOnNoNode(t *testing.T) {
	f, dc := demoFleet(t, 8<<20)
	ctx := withTimeout(t, 10*time.Minute)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	tag := "sparklane-test/built:" + hex.EncodeToString(b)
	t.Cleanup(func() { _, _ = dc.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true}) })

	// The context: engine-sim's static binary and its Dockerfile, on the NAS.
	dir := filepath.Join(f.cfg.SharedRoots[0], "engines", "sim-"+hex.EncodeToString(b))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gob := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", filepath.Join(dir, "engine-sim"), "./engine-sim")
	gob.Dir, gob.Env = filepath.Join("..", ".."), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := gob.CombinedOutput(); err != nil {
		t.Fatalf("go build engine-sim: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(simimage.Dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(f.dir, "recipes", "demo-2x.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(src), `name = "demo-2x"`, `name = "built-2x"`, 1)
	s = strings.Replace(s, `aliases = ["d2"]`, `aliases = []`, 1)
	s = regexp.MustCompile(`(?m)^image = .*$`).ReplaceAllString(s, `image = "`+tag+`"`)
	write := func(body string) {
		if err := os.WriteFile(filepath.Join(f.dir, "recipes", "built-2x.toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A failing build: the step and the last lines.
	write(s + "\n[build]\ncontext = \"" + dir + "\"\ndockerfile = \"Dockerfile.bad\"\n")
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile.bad"), []byte("FROM scratch\nCOPY no-such-file /x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := f.starter(ctx, "image", "build", "--lane", "built-2x")
	if code == 0 || !strings.Contains(errOut+out, "no-such-file") || !strings.Contains(errOut+out, "last lines") {
		t.Fatalf("a failing build: exit %d\n%s\n%s\nwant the failing COPY and the log's last lines", code, out, errOut)
	}

	write(s + "\n[build]\ncontext = \"" + dir + "\"\n")
	code, out, errOut = f.starter(ctx, "cutover", "--lane", "built-2x", "--dry-run")
	if code != 0 || !strings.Contains(out, "would be built on n1") {
		t.Fatalf("dry run: exit %d\n%s\n%s\nwant the image to be built on n1", code, out, errOut)
	}
	if code, out, errOut = f.starter(ctx, "cutover", "--lane", "built-2x"); code != 0 {
		t.Fatalf("cutover of a lane whose image is on no node: exit %d\n%s\n%s", code, out, errOut)
	}
	ins, err := dc.ImageInspect(ctx, tag)
	if err != nil || ins.Config == nil || len(ins.Config.Entrypoint) == 0 || ins.Config.Entrypoint[0] != "/engine-sim" {
		t.Fatalf("built image %s: %v %+v", tag, err, ins.Config)
	}
	if n := activitiesScheduled(t, f, workflows.CutoverID("demo-2x"), "BuildImage"); n != 1 {
		t.Errorf("cutover built %d times, want 1", n)
	}
	saveHistory(t, f, workflows.CutoverID("demo-2x"), "cutover-build")
	if code, out, errOut = f.starter(ctx, "stop", "--lane", "built-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
}
