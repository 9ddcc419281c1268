package sparserows

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// Issue 13.8: a read-only dst (a tmpfs remounted ro: root ignores modes)
// and a file where dst's directory belongs are permanent faults naming the
// path, for both formats, not errors retried for minutes.
func TestDstFaultsArePermanent(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a tmpfs and must run as root")
	}
	src := t.TempDir()
	standardCheckpoint(t, src)
	for _, format := range []string{FormatPacked, FormatSparseCopy} {
		spec := baseSpec(t, src, format, 0, 2)
		root := spec.Roots[0]
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", root).CombinedOutput(); err != nil {
			t.Fatalf("mount tmpfs on %s: %v: %s", root, err, out)
		}
		t.Cleanup(func() { exec.Command("umount", root).Run() })
		// A file in the way of dst's parent.
		if err := os.WriteFile(filepath.Join(root, "state"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Stage(context.Background(), spec, staging.Options{})
		if typ, _ := fault.TypeOf(err); typ != staging.NotADirectory || !strings.Contains(err.Error(), filepath.Join(root, "state")) {
			t.Fatalf("%s: file in the way: want NotADirectory naming %s, got %v", format, filepath.Join(root, "state"), err)
		}
		if err := os.Remove(filepath.Join(root, "state")); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-o", "remount,ro", root).CombinedOutput(); err != nil {
			t.Fatalf("remount %s read-only: %v: %s", root, err, out)
		}
		_, err = Stage(context.Background(), spec, staging.Options{})
		if typ, _ := fault.TypeOf(err); typ != staging.ReadOnly || !strings.Contains(err.Error(), filepath.Join(root, "state")) || !strings.Contains(err.Error(), "read-write") {
			t.Fatalf("%s: read-only dst: want ReadOnlyDestination naming the path, got %v", format, err)
		}
	}
}
