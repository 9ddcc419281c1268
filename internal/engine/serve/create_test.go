package serve_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/fault"
)

// Item 4 of issue 14: a create = true mount (the mimo lanes' JIT caches)
// works on a fresh node: its missing source is made beneath the node root,
// given to the container's user, bound read-write, and the engine in a
// real container writes into it. A source reached through a link out of
// the root is refused and nothing is made outside.
func TestCreateMountOnFreshNode(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx := context.Background()
	root := t.TempDir() // the node root; nothing under it yet
	src := filepath.Join(root, "cache", lane, "triton")
	s := spec(lane, "serve-n1", 0, "h", img, "write:/root/.cache/sglang/triton/kernel.bin", "exit:0")
	s.Mounts, s.Roots = []contract.Mount{{Src: src, Dst: "/root/.cache/sglang/triton", Create: true}}, []string{root}
	s.CreateSources, s.CreateOwner = []string{src}, "4242:4343"
	if _, err := serve.StartRank(ctx, d, s); err != nil {
		t.Fatalf("first serve on a fresh node: %v", err)
	}
	st := waitExited(t, d, lane, 1)
	if st[0].ExitCode != 0 {
		t.Fatalf("engine could not write its JIT cache: %+v", st[0])
	}
	if _, err := os.Stat(filepath.Join(src, "kernel.bin")); err != nil {
		t.Fatalf("the engine's write did not land in the created source: %v", err)
	}
	for _, p := range []string{filepath.Join(root, "cache"), filepath.Join(root, "cache", lane), src} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if o := fi.Sys().(*syscall.Stat_t); o.Uid != 4242 || o.Gid != 4343 || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: owner %d:%d mode %v, want 4242:4343 0755 (the container's user)", p, o.Uid, o.Gid, fi.Mode().Perm())
		}
	}
	if fi, _ := os.Stat(root); fi.Sys().(*syscall.Stat_t).Uid == 4242 {
		t.Errorf("the node root itself was given away")
	}

	// A second serve finds the source and leaves it as it is.
	removeLane(d, lane)
	if _, err := serve.StartRank(ctx, d, s); err != nil {
		t.Fatalf("second serve: %v", err)
	}
	waitExited(t, d, lane, 1)

	// Through a link out of the root: refused, nothing made outside.
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "esc")); err != nil {
		t.Fatal(err)
	}
	bad := spec(lane, "serve-n1", 1, "h", img, "exit:0")
	escSrc := filepath.Join(root, "esc", "jit")
	bad.Mounts, bad.Roots, bad.CreateSources = []contract.Mount{{Src: escSrc, Dst: "/jit", Create: true}}, []string{root}, []string{escSrc}
	_, err := serve.StartRank(ctx, d, bad)
	if typ, _ := fault.TypeOf(err); typ != serve.MountRefused {
		t.Fatalf("create through a link out of the root: %v, want MountRefused", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("created %v outside the node root", ents)
	}
}

// Item 5: two binds at one container path (a recipe mount over a file the
// staging manifest binds) are refused before any container exists, naming
// the path and both sources, not left to Docker.
func TestDuplicateBindRefusedBeforeDocker(t *testing.T) {
	d, img, lane := dockerLane(t)
	root := t.TempDir()
	a, b := filepath.Join(root, "export"), filepath.Join(root, "nas-page15")
	for _, p := range []string{a, b} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(b, "page15-00001.safetensors"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := spec(lane, "serve-n1", 0, "h", img, "sleep")
	s.Roots = []string{root}
	s.Mounts = []contract.Mount{
		{Src: a, Dst: "/model", ReadOnly: true},
		{Src: filepath.Join(b, "page15-00001.safetensors"), Dst: "/model/page15/page15-00001.safetensors", ReadOnly: true},
		{Src: filepath.Join(b, "page15-00001.safetensors"), Dst: "/model/page15//page15-00001.safetensors", ReadOnly: true},
	}
	_, err := serve.StartRank(context.Background(), d, s)
	if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec || !strings.Contains(err.Error(), "/model/page15/page15-00001.safetensors") || !strings.Contains(err.Error(), "two binds") {
		t.Fatalf("duplicate binds: %v, want InvalidSpec naming the path", err)
	}
	if cs := listLane(t, d, lane); len(cs) != 0 {
		t.Fatalf("a container was created despite duplicate binds: %v", cs)
	}
}
