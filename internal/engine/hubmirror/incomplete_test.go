package hubmirror

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/staging"
)

// Item 14 of issue 14: a snapshot still being downloaded (partial blobs) or
// one whose index names shards it lacks is refused, naming what is
// missing, before anything is written; a complete one stages.
func TestIncompleteSnapshotRefused(t *testing.T) {
	index := func(t *testing.T, f *fixture, shards ...string) {
		t.Helper()
		wm := map[string]string{}
		for i, s := range shards {
			wm[filepath.Join("model.layers."+string(rune('a'+i)), "weight")] = s
		}
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 1}, "weight_map": wm})
		must(t, err)
		f.repo.link(rev1, "model.safetensors.index.json", f.repo.blob(b, false))
	}
	noWrite := func(t *testing.T, f *fixture) {
		t.Helper()
		if _, err := os.Lstat(f.dst); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a refused source wrote to dst %s (%v)", f.dst, err)
		}
	}

	t.Run("partial blob", func(t *testing.T) {
		f := newFixture(t, false)
		index(t, f, "model-00001.safetensors", "model-00002.safetensors")
		partial := shaHex([]byte("half")) + ".incomplete"
		must(t, os.WriteFile(filepath.Join(f.repo.dir, "blobs", partial), []byte("half"), 0o644))
		for _, dry := range []bool{true, false} {
			_, err := Stage(context.Background(), f.spec(), staging.Options{DryRun: dry})
			wantType(t, err, SourceIncomplete, "org/model", partial, filepath.Join(f.repo.dir, "blobs"))
		}
		noWrite(t, f)
	})

	t.Run("index names missing shards", func(t *testing.T) {
		f := newFixture(t, false)
		index(t, f, "model-00001.safetensors", "model-00002.safetensors", "model-00003.safetensors", "model-00004.safetensors")
		_, err := Stage(context.Background(), f.spec(), staging.Options{})
		wantType(t, err, SourceIncomplete, "org/model", rev1, "model.safetensors.index.json", "2 shard(s)", "model-00003.safetensors", "model-00004.safetensors")
		noWrite(t, f)
	})

	t.Run("skipped shards still count as present", func(t *testing.T) {
		f := newFixture(t, false)
		index(t, f, "model-00001.safetensors", "model-00002.safetensors")
		sp := f.spec()
		sp.Skip = []string{"model-00002.safetensors"}
		res, err := Stage(context.Background(), sp, staging.Options{})
		must(t, err)
		if res.SkippedFiles != 1 {
			t.Fatalf("result %+v: want the skipped shard counted", res)
		}
	})

	t.Run("complete", func(t *testing.T) {
		f := newFixture(t, false)
		index(t, f, "model-00001.safetensors", "model-00002.safetensors")
		if _, err := Stage(context.Background(), f.spec(), staging.Options{}); err != nil {
			t.Fatalf("a complete snapshot with an index was refused: %v", err)
		}
		snap := filepath.Join(f.mirrorRepo(), "snapshots", rev1)
		for _, p := range []string{"model-00001.safetensors", "model-00002.safetensors"} {
			fileEquals(t, filepath.Join(snap, p), f.blobs[p])
		}
		if _, err := os.Stat(filepath.Join(snap, "model.safetensors.index.json")); err != nil {
			t.Fatalf("index not staged: %v", err)
		}
	})
}
