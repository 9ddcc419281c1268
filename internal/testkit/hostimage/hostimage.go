package hostimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
)

// Labels mark what the tests create, for a sweep of leftovers.
var Labels = map[string]string{"sparklane.test": "1"}

// Docker is the local engine; the test fails (never skips) when it does
// not answer. why says what needs it, for the failure.
func Docker(t testing.TB, why string) *client.Client {
	t.Helper()
	c, err := client.NewClientWithOpts(client.WithHost("unix:///var/run/docker.sock"), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatalf("docker client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("Docker engine not reachable at /var/run/docker.sock (%v): %s", err, why)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Build builds, unless the engine has it already, an image FROM scratch
// holding files (its path in the image → a file on this machine, links
// followed) and the shared libraries `ldd` lists for each dynamic one, with
// entrypoint when given. Its tag is repo:HASH, the hash of the names and
// contents, so a changed program is a new image.
func Build(ctx context.Context, d client.APIClient, repo string, files map[string]string, entrypoint string) (string, error) {
	all := map[string]string{}
	for name, src := range files {
		real, err := filepath.EvalSymlinks(src)
		if err != nil {
			return "", err
		}
		all[name] = real
		libs, err := sharedLibs(real)
		if err != nil {
			return "", err
		}
		for _, l := range libs {
			all[strings.TrimPrefix(l, "/")] = l
		}
	}
	df := "FROM scratch\nCOPY . /\n"
	if entrypoint != "" {
		df += fmt.Sprintf("ENTRYPOINT [%q]\n", entrypoint)
	}
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	h := sha256.New()
	add := func(name string, mode int64, b []byte) {
		h.Write([]byte(name))
		h.Write(b)
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(b))})
		_, _ = tw.Write(b)
	}
	add("Dockerfile", 0o644, []byte(df))
	for _, name := range slices.Sorted(maps.Keys(all)) {
		b, err := os.ReadFile(all[name])
		if err != nil {
			return "", err
		}
		add(name, 0o755, b)
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	tag := repo + ":" + hex.EncodeToString(h.Sum(nil)[:6])
	if _, err := d.ImageInspect(ctx, tag); err == nil {
		return tag, nil
	}
	return tag, buildTagged(ctx, d, tag, &ctxTar)
}

// sharedLibs are the libraries ldd lists for bin; none for a static
// program ("not a dynamic executable", exit 1).
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %v", bin, err)
	}
	var libs []string
	for _, l := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(l) {
			if strings.HasPrefix(f, "/") {
				libs = append(libs, f)
			}
		}
	}
	return libs, nil
}

// buildTagged builds tag from the build context ctxTar (a tar stream).
func buildTagged(ctx context.Context, d client.APIClient, tag string, ctxTar io.Reader) error {
	resp, err := d.ImageBuild(ctx, ctxTar, build.ImageBuildOptions{
		Tags: []string{tag}, Remove: true, ForceRemove: true, Labels: Labels, Version: build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("ImageBuild %s: %w", tag, err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("read the build output of %s: %w", tag, err)
		}
		if msg.Error != "" {
			return fmt.Errorf("image build %s: %s", tag, msg.Error)
		}
	}
}
