package activities

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/images"
	"github.com/sparklane/sparklane/internal/fault"
)

// On this machine's real Docker, an image under a tag with no repo digest
// (as `docker load` leaves a moved image): EnsureImage of the pinned
// repo:tag@sha256:D is ImageMissing as before, and with Resolve reports
// it Unpinned with its ID, for the workflow to check against the nodes
// carrying the digest; BuildImage built it here from a shared context.
func TestEnsureImageResolvesAPinnedImageUnderItsTag(t *testing.T) {
	shared := t.TempDir()
	dir := filepath.Join(shared, "ctx")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	for name, body := range map[string]string{"Dockerfile": "FROM scratch\nCOPY f /f\n", "f": hex.EncodeToString(b)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := &NodeActivities{Node: config.Node{Name: "n1"}, SharedRoots: []string{shared}, Log: zap.NewNop()}
	ctx := context.Background()
	tag := "sparklane-test/pinned:" + hex.EncodeToString(b)
	built, err := a.BuildImage(ctx, contract.BuildImageInput{Image: contract.MustImageRef(tag), Build: contract.Build{Context: dir}})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := a.dockerClient(ctx)
	t.Cleanup(func() {
		if st, ok := d.(images.Store); ok {
			_, _ = st.ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true})
		}
	})
	pinned := contract.MustImageRef(tag + "@sha256:" + strings.Repeat("5a", 32))
	var app *temporal.ApplicationError
	if _, err := a.EnsureImage(ctx, contract.EnsureImageInput{Image: pinned}); !errors.As(err, &app) || app.Type() != fault.ImageMissing {
		t.Fatalf("EnsureImage of the pin without Resolve: %v, want ImageMissing", err)
	}
	r, err := a.EnsureImage(ctx, contract.EnsureImageInput{Image: pinned, Resolve: true})
	if err != nil || !r.Unpinned || r.ID != built.ID {
		t.Fatalf("EnsureImage with Resolve: %+v, %v; want unpinned %s", r, err, built.ID)
	}
}
