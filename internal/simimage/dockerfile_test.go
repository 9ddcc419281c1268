package simimage_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/simimage"
)

// The release ships engine-sim/Dockerfile beside the static engine-sim
// (scripts/release) as the image's build context: it is the Dockerfile
// simimage builds with, so a context copied from a release builds the
// same image.
func TestReleasedDockerfileIsTheBuiltOne(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "engine-sim", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != simimage.Dockerfile {
		t.Fatalf("engine-sim/Dockerfile:\n%s\nsimimage.Dockerfile:\n%s", b, simimage.Dockerfile)
	}
}
