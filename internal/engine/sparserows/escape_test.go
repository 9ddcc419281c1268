package sparserows

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// Issue 13.2: dst = ROOT/esc/engram with esc a link out of the node's root
// is refused (LinkEscape naming dst and the component) in a dry run and a
// real one, and nothing lands outside; a link inside the root is followed.
func TestDstLinkOutOfRootsRefused(t *testing.T) {
	src := t.TempDir()
	standardCheckpoint(t, src)
	for _, format := range []string{FormatPacked, FormatSparseCopy} {
		spec := baseSpec(t, src, format, 0, 2)
		root := spec.Roots[0]
		outside := t.TempDir()
		esc := filepath.Join(root, "esc")
		if err := os.Symlink(outside, esc); err != nil {
			t.Fatal(err)
		}
		spec.Dst = filepath.Join(esc, "engram")
		for _, dry := range []bool{true, false} {
			_, err := Stage(context.Background(), spec, staging.Options{DryRun: dry})
			if typ, _ := fault.TypeOf(err); typ != fault.LinkEscape || !strings.Contains(err.Error(), esc) || !strings.Contains(err.Error(), spec.Dst) {
				t.Fatalf("%s dry=%v: want a LinkEscape naming %s, got %v", format, dry, esc, err)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("%s dry=%v: staging wrote outside the root: %v", format, dry, ents)
			}
		}
		if _, err := Verify(context.Background(), spec, false); err == nil {
			t.Fatalf("%s: verify through the escaping link did not fail", format)
		}
		// Inside the root, a link is fine.
		if err := os.MkdirAll(filepath.Join(root, "real"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("real", filepath.Join(root, "in")); err != nil {
			t.Fatal(err)
		}
		spec.Dst = filepath.Join(root, "in", "engram")
		if _, err := Stage(context.Background(), spec, staging.Options{}); err != nil {
			t.Fatalf("%s: dst through a link inside the root: %v", format, err)
		}
		if vr, err := Verify(context.Background(), spec, true); err != nil || !vr.Clean() {
			t.Fatalf("%s: verify %+v %v", format, vr, err)
		}
	}
}

// An index naming a shard outside the snapshot dir is refused before
// anything is read or written.
func TestShardNameOutsideSrcRefused(t *testing.T) {
	src := t.TempDir()
	standardCheckpoint(t, src)
	var ix map[string]any
	b := readFile(t, filepath.Join(src, IndexName))
	if err := json.Unmarshal(b, &ix); err != nil {
		t.Fatal(err)
	}
	wm := ix["weight_map"].(map[string]any)
	wm["model.layers.3.engram.table"] = "../../escape.safetensors"
	b, _ = json.Marshal(ix)
	if err := os.WriteFile(filepath.Join(src, IndexName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	spec := baseSpec(t, src, FormatSparseCopy, 0, 2)
	_, err := Stage(context.Background(), spec, staging.Options{})
	if typ, _ := fault.TypeOf(err); typ != SourceCorrupt || !strings.Contains(err.Error(), "../../escape.safetensors") {
		t.Fatalf("want SourceCorrupt naming the shard, got %v", err)
	}
	if _, err := os.Stat(spec.Dst); !os.IsNotExist(err) {
		t.Fatalf("dst was created: %v", err)
	}
}
