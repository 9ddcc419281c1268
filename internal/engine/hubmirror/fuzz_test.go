package hubmirror

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/staging"
)

// secretMark is in every file outside src and the shared roots: none of
// its bytes may ever reach the mirror.
const secretMark = "HOST-SECRET-0d9f1c"

// fuzzNames are path components, "..x" style names included.
var fuzzNames = []string{"a", "b", "..x", "a..b", "sub", "model.safetensors", "config.json", "...", ".hidden"}

// buildFuzzTree lays out base/{src/hub,nasroot,outside,node} and then the
// entries data asks for: dirs, files, relative, absolute, dangling and
// looping links in the repo, and links planted in dst. Creation errors
// (a parent that is a file, a name taken) are ignored: the tree is
// whatever the bytes make.
func buildFuzzTree(t *testing.T, base string, data []byte) (repo string) {
	t.Helper()
	hub := filepath.Join(base, "src", "hub")
	r := newRepo(t, hub, "org/model")
	repo = r.dir
	shared := filepath.Join(base, "nasroot")
	outside := filepath.Join(base, "outside")
	dst := filepath.Join(base, "node", "hf")
	for _, d := range []string{shared, outside, filepath.Join(base, "node")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte(secretMark+" outside"), 0o644))
	must(t, os.WriteFile(filepath.Join(shared, "vocab.txt"), []byte("shared vocab"), 0o644))
	r.link(rev1, "config.json", r.blob([]byte(`{"ok":true}`), false))
	r.ref("main", rev1)

	i := 0
	next := func() int {
		if i >= len(data) {
			return 0
		}
		b := data[i]
		i++
		return int(b)
	}
	parents := []string{
		filepath.Join(repo, "snapshots", rev1),
		filepath.Join(repo, "snapshots", rev1, "sub"),
		filepath.Join(repo, "blobs"),
		filepath.Join(repo, "refs"),
		filepath.Join(repo, "snapshots"),
		repo,
		filepath.Join(dst, "hub", "models--org--model"),
		filepath.Join(dst, "hub", "models--org--model", "snapshots", rev1),
	}
	relTargets := []string{
		"../../blobs/" + shaHex([]byte(`{"ok":true}`)), "..", ".", "../../../../../outside/secret",
		"../../../../../../outside", "sub/../../..", "a", "../a", "missing", "../../blobs/..x",
		"../../../../../nasroot/vocab.txt", "../../../../../node/hf",
	}
	absTargets := []string{
		filepath.Join(outside, "secret"), outside, filepath.Join(shared, "vocab.txt"), shared,
		filepath.Join(repo, "blobs"), filepath.Join(base, "nonexistent"), dst, filepath.Join(base, "node"), "/",
	}
	for n := 0; i < len(data) && n < 24; n++ {
		kind := next() % 7
		dir := parents[next()%len(parents)]
		if kind != 6 && strings.HasPrefix(dir, dst) {
			dir = parents[0] // only kind 6 plants into dst
		}
		name := filepath.Join(dir, fuzzNames[next()%len(fuzzNames)])
		os.MkdirAll(filepath.Dir(name), 0o755)
		switch kind {
		case 0:
			os.MkdirAll(name, 0o755)
		case 1:
			os.WriteFile(name, bytes.Repeat([]byte{byte(next())}, next()*37), 0o644)
		case 2:
			os.Symlink(relTargets[next()%len(relTargets)], name)
		case 3:
			os.Symlink(absTargets[next()%len(absTargets)], name)
		case 4:
			os.Symlink(filepath.Base(name), name) // a link to itself
		case 5:
			other := name + "2"
			os.Symlink(filepath.Base(other), name)
			os.Symlink(filepath.Base(name), other) // a two-link loop
		case 6:
			// Planted in dst: a directory or link on the mirror's way.
			dir = parents[6+next()%2]
			name = filepath.Join(dir, fuzzNames[next()%len(fuzzNames)])
			os.MkdirAll(filepath.Dir(name), 0o755)
			if next()%2 == 0 {
				os.Symlink(absTargets[next()%len(absTargets)], name)
			} else {
				os.Symlink(relTargets[next()%len(relTargets)], name)
			}
		}
	}
	return repo
}

// without drops the entries under dir from a treeState map.
func without(m map[string]string, dir string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if !within(k, dir) {
			out[k] = v
		}
	}
	return out
}

// FuzzPlan (issue 13): whatever tree the bytes make under src (dirs,
// files, relative/absolute/dangling/looping links, names with ".."), and
// whatever links sit in dst, a dry run changes nothing at all, and a real
// stage (then a verify) creates, modifies or deletes nothing outside dst
// and never copies into dst a byte of a file outside src and the shared
// roots. Errors are allowed (they are the refusals); panics and escapes
// are not. Seeds run in every `go test`; fuzz with
// go test -run '^$' -fuzz FuzzPlan -fuzztime 60s ./internal/engine/hubmirror/
func FuzzPlan(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 0, 0, 3}) // relative link to outside/secret
	f.Add([]byte{3, 0, 1, 0}) // absolute link to outside/secret
	f.Add([]byte{3, 2, 0, 1}) // blobs/..x -> outside (a directory link)
	f.Add([]byte{2, 0, 2, 9, 3, 2, 2, 1})
	f.Add([]byte{4, 0, 0, 5, 1, 3})                   // self loop, two-link loop
	f.Add([]byte{6, 0, 0, 0, 0, 1})                   // dst: models--org--model/a -> outside/secret
	f.Add([]byte{6, 0, 1, 4, 0, 1})                   // dst: snapshots/REV/..x -> outside
	f.Add([]byte{6, 6, 0, 2, 0, 6})                   // dst: link to dst itself
	f.Add([]byte{3, 4, 1, 1, 3, 0, 3, 2, 0, 0, 4, 0}) // snapshots/..x -> /, links to shared
	f.Add([]byte{1, 0, 5, 7, 3, 2, 1, 3, 10})         // a file, and a link into shared
	f.Add([]byte{2, 1, 2, 4, 2, 0, 4, 11})            // sub/..: a link to ../../../../../node/hf (dst)
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		buildFuzzTree(t, base, data)
		dst := filepath.Join(base, "node", "hf")
		sp := Spec{
			Src: filepath.Join(base, "src", "hub"), Dst: dst, Repos: []string{"org/model"}, Skip: []string{"sub/b"},
			Roots: []string{filepath.Join(base, "node")}, SharedRoots: []string{filepath.Join(base, "nasroot")},
			Exports: []Export{{Repo: "org/model", Path: filepath.Join(base, "node", "export")}},
		}
		before := treeState(t, base)
		_, err := Stage(context.Background(), sp, staging.Options{DryRun: true})
		if after := treeState(t, base); !sameState(before, after) {
			t.Fatalf("a dry run changed the tree (err %v)", err)
		}
		_, err = Stage(context.Background(), sp, staging.Options{Parallel: 2})
		if len(data) == 0 && err != nil {
			t.Fatalf("the plain tree did not stage: %v", err) // the harness itself works
		}
		_, verr := Verify(context.Background(), sp, false)
		after := treeState(t, base)
		for _, d := range []string{dst, filepath.Join(base, "node", "export"), BindManifestPath(filepath.Join(base, "node", "export"))} {
			before, after = without(before, d), without(after, d)
		}
		if !sameState(before, after) {
			for k, v := range after {
				if before[k] != v {
					t.Errorf("changed outside dst: %s: %q -> %q", k, before[k], v)
				}
			}
			for k := range before {
				if _, ok := after[k]; !ok {
					t.Errorf("deleted outside dst: %s", k)
				}
			}
			t.Fatalf("stage (err %v, verify err %v) touched paths outside dst", err, verr)
		}
		for _, d := range []string{dst, filepath.Join(base, "node", "export")} {
			filepath.WalkDir(d, func(p string, de fs.DirEntry, werr error) error {
				if werr != nil || !de.Type().IsRegular() {
					return nil
				}
				if b, rerr := os.ReadFile(p); rerr == nil && bytes.Contains(b, []byte(secretMark)) {
					t.Fatalf("%s holds bytes of a file outside src and the shared roots (stage err %v)", p, err)
				}
				return nil
			})
		}
	})
}
