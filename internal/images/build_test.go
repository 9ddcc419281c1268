package images

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

func TestCheckBuildNamesKeyAndFix(t *testing.T) {
	for _, c := range []struct {
		b    contract.Build
		want string
	}{
		{contract.Build{}, "neither context nor git"},
		{contract.Build{Context: "/nas/x", Git: "https://h/r.git"}, "both context and git"},
		{contract.Build{Git: "https://h/r.git"}, "has no ref"},
		{contract.Build{Git: "ftp://h/r", Ref: "v1"}, "not a repository URL"},
		{contract.Build{Context: "/nas/x", Ref: "v1"}, "ref \"v1\" without git"},
		{contract.Build{Context: "/nas/x", Dockerfile: "../Dockerfile"}, "leaves the context"},
		{contract.Build{Context: "nas/x"}, "not an absolute clean path"},
		{contract.Build{Context: "/srv/x"}, "under no shared root"},
		{contract.Build{Context: "/nas/x", Args: map[string]string{"A B": "1"}}, "not an ARG name"},
	} {
		err := CheckBuild(c.b, []string{"/nas"})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckBuild(%+v) = %v, want %q", c.b, err, c.want)
		}
	}
	if err := CheckBuild(contract.Build{Git: "https://h/r.git", Ref: "v1"}, nil); err != nil {
		t.Errorf("a pinned git build: %v", err)
	}
}
