package hubmirror

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/staging"
)

// Issue 13.8: destination faults that retrying cannot fix are permanent,
// typed, and name the path and what to do — a read-only filesystem used to
// be retried 20 times over 7.5 minutes. Root ignores modes, so the faults
// are real ones: a tmpfs remounted read-only (EROFS), an immutable
// directory (EPERM), a file where a directory is needed (ENOTDIR).
func TestDestinationFaultsArePermanent(t *testing.T) {
	cases := []struct {
		name, typ string
		// setup prepares node (the node's root) and returns the path the
		// error must name and the advice it must give.
		setup func(t *testing.T, node string) (string, string)
	}{
		{"read-only", staging.ReadOnly, func(t *testing.T, node string) (string, string) {
			mountTmpfs(t, node, "16m")
			if out, err := exec.Command("mount", "-o", "remount,ro", node).CombinedOutput(); err != nil {
				t.Fatalf("remount %s read-only: %v: %s", node, err, out)
			}
			return filepath.Join(node, "hf"), "remount it read-write"
		}},
		{"immutable", staging.PermissionDenied, func(t *testing.T, node string) (string, string) {
			dst := filepath.Join(node, "hf")
			must(t, os.MkdirAll(dst, 0o755))
			if out, err := exec.Command("chattr", "+i", dst).CombinedOutput(); err != nil {
				t.Fatalf("chattr +i %s: %v: %s", dst, err, out)
			}
			t.Cleanup(func() { exec.Command("chattr", "-i", dst).Run() })
			return filepath.Join(dst, "hub"), "write access"
		}},
		{"file-in-the-way", staging.NotADirectory, func(t *testing.T, node string) (string, string) {
			must(t, os.MkdirAll(filepath.Join(node, "hf"), 0o755))
			must(t, os.WriteFile(filepath.Join(node, "hf", "hub"), []byte("not a dir"), 0o644))
			return filepath.Join(node, "hf", "hub"), "move that file away"
		}},
		{"file-in-the-way-deep", staging.NotADirectory, func(t *testing.T, node string) (string, string) {
			repo := filepath.Join(node, "hf", "hub", "models--org--model")
			must(t, os.MkdirAll(repo, 0o755))
			must(t, os.WriteFile(filepath.Join(repo, "blobs"), []byte("not a dir"), 0o644))
			return filepath.Join(repo, "blobs"), "move that file away"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			node := filepath.Join(f.root, "node")
			path, advice := tc.setup(t, node)
			sp := f.spec()
			sp.Dst, sp.Roots = filepath.Join(node, "hf"), []string{node}
			_, err := Stage(context.Background(), sp, staging.Options{})
			wantType(t, err, tc.typ, path, advice)
			t.Logf("%s: %v", tc.name, err)
		})
	}
}
