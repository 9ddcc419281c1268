package itest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"

	"github.com/sparklane/sparklane/internal/simimage"
)

// The image tests' shared fixture: a fresh tag, an engine-sim build
// context on the NAS, and a lane derived from demo-2x that names them.

// imageTag is "sparklane-test/REPO:SUFFIX" with a random suffix (also
// returned), removed from dc when the test ends.
func imageTag(t *testing.T, dc *dockerclient.Client, repo string) (tag, suffix string) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	suffix = hex.EncodeToString(b)
	tag = "sparklane-test/" + repo + ":" + suffix
	t.Cleanup(func() { _, _ = dc.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true}) })
	return tag, suffix
}

// simContext writes an image build context on the NAS (under engines/
// name): engine-sim's static binary and its FROM-scratch Dockerfile.
func simContext(ctx context.Context, t *testing.T, f *fleet, dc *dockerclient.Client, name string) string {
	t.Helper()
	dir := filepath.Join(f.cfg.SharedRoots[0], "engines", name)
	if err := simimage.WriteContext(ctx, dc, dir, simimage.Options{}, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// imageLane returns a writer of lane NAME's recipe: demo-2x's, without
// its aliases, with image = IMG followed by the top-level lines top, and
// tail (tables such as [build]) at the end.
func imageLane(t *testing.T, f *fleet, name string) func(img, top, tail string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(f.dir, "recipes", "demo-2x.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(src), `name = "demo-2x"`, `name = "`+name+`"`, 1)
	s = strings.Replace(s, `aliases = ["d2"]`, `aliases = []`, 1)
	return func(img, top, tail string) {
		t.Helper()
		body := regexp.MustCompile(`(?m)^image = .*$`).ReplaceAllLiteralString(s, `image = "`+img+`"`+top) + tail
		if err := os.WriteFile(filepath.Join(f.dir, "recipes", name+".toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
