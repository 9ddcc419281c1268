package simimage

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
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/client"
	"github.com/docker/docker/errdefs"
)

// Repo is the image repository engine-sim is tagged under; recipes with
// runtime "sim" name Repo + ":latest" or a version tag.
const Repo = "sparklane/engine-sim"

// LabelVersion carries the binary hash on the image, so a node can tell
// which engine-sim it runs.
const LabelVersion = "sparklane.engine-sim.version"

// Dockerfile is the whole image: the static binary, also as /bin/sh (run
// as sh it is a POSIX shell interpreter, for pre_exec and post_exec).
const Dockerfile = "FROM scratch\nCOPY engine-sim /engine-sim\nCOPY engine-sim /bin/sh\nENTRYPOINT [\"/engine-sim\"]\n"

// Options says where the source is and how to build.
type Options struct {
	// ModuleDir is the sparklane module root (holding go.mod and
	// engine-sim/); "" walks up from the working directory to go.mod.
	ModuleDir string
	// Binary is a prebuilt static engine-sim to package instead of
	// compiling (for installs without the Go toolchain or the source).
	Binary string
	// GoBin is the go command (default "go" on PATH).
	GoBin string
	// Log receives the build output lines; nil discards them.
	Log io.Writer
}

// Build returns Repo:VERSION (VERSION = the first 12 hex digits of the
// binary's SHA-256), building and tagging it (and :latest) when no image
// has that tag yet.
func Build(ctx context.Context, cli client.APIClient, opt Options) (ref string, err error) {
	logw := opt.Log
	if logw == nil {
		logw = io.Discard
	}
	bin, cleanup, err := binary(ctx, cli, opt)
	if err != nil {
		return "", err
	}
	defer cleanup()
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("read engine-sim binary %s: %w", bin, err)
	}
	sum := sha256.Sum256(data)
	version := hex.EncodeToString(sum[:])[:12]
	ref = Repo + ":" + version
	latest := Repo + ":latest"

	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		fmt.Fprintf(logw, "image %s already present\n", ref)
		if err := cli.ImageTag(ctx, ref, latest); err != nil {
			return "", fmt.Errorf("tag %s as %s: %w", ref, latest, err)
		}
		return ref, nil
	} else if !errdefs.IsNotFound(err) {
		return "", fmt.Errorf("inspect image %s on the Docker engine at %s: %w", ref, cli.DaemonHost(), err)
	}

	tarball, err := buildContext(data)
	if err != nil {
		return "", err
	}
	resp, err := cli.ImageBuild(ctx, bytes.NewReader(tarball), build.ImageBuildOptions{
		Tags:        []string{ref, latest},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		Labels:      map[string]string{LabelVersion: version},
	})
	if err != nil {
		return "", fmt.Errorf("build image %s on the Docker engine at %s: %w", ref, cli.DaemonHost(), err)
	}
	defer resp.Body.Close()
	if err := readBuildStream(resp.Body, logw); err != nil {
		return "", fmt.Errorf("build image %s: %w", ref, err)
	}
	if _, err := cli.ImageInspect(ctx, ref); err != nil {
		return "", fmt.Errorf("build image %s finished but the image is not there: %w", ref, err)
	}
	return ref, nil
}

// WriteContext writes engine-sim's build context into dir (made if
// missing): the static binary for cli's architecture and Dockerfile, plus
// extra files (name → content), so a recipe's [build] context on a shared
// root can be made from source with no registry.
func WriteContext(ctx context.Context, cli client.APIClient, dir string, opt Options, extra map[string]string) error {
	bin, cleanup, err := binary(ctx, cli, opt)
	if err != nil {
		return err
	}
	defer cleanup()
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("read engine-sim binary %s: %w", bin, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("build context %s: %w", dir, err)
	}
	files := map[string][]byte{"engine-sim": data, "Dockerfile": []byte(Dockerfile)}
	for name, body := range extra {
		files[name] = []byte(body)
	}
	for name, body := range files {
		mode := os.FileMode(0o644)
		if name == "engine-sim" {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, name), body, mode); err != nil {
			return fmt.Errorf("build context %s: %w", dir, err)
		}
	}
	return nil
}

// binary returns the path of a static engine-sim for the daemon's
// architecture: opt.Binary, or one compiled into a temp dir.
func binary(ctx context.Context, cli client.APIClient, opt Options) (string, func(), error) {
	nop := func() {}
	if opt.Binary != "" {
		if _, err := os.Stat(opt.Binary); err != nil {
			return "", nop, fmt.Errorf("engine-sim binary %s: %w", opt.Binary, err)
		}
		return opt.Binary, nop, nil
	}
	root, err := moduleRoot(opt.ModuleDir)
	if err != nil {
		return "", nop, err
	}
	arch := runtime.GOARCH
	if v, err := cli.ServerVersion(ctx); err == nil && v.Arch != "" {
		arch = v.Arch
	}
	tmp, err := os.MkdirTemp("", "engine-sim-build-")
	if err != nil {
		return "", nop, fmt.Errorf("temp dir for the engine-sim build: %w", err)
	}
	cleanup := func() { os.RemoveAll(tmp) }
	out := filepath.Join(tmp, "engine-sim")
	gobin := opt.GoBin
	if gobin == "" {
		gobin = "go"
	}
	cmd := exec.CommandContext(ctx, gobin, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, "./engine-sim")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		cleanup()
		return "", nop, fmt.Errorf("CGO_ENABLED=0 go build ./engine-sim in %s: %v: %s", root, err, strings.TrimSpace(string(b)))
	}
	return out, cleanup, nil
}

// moduleRoot is dir, or the first parent of the working dir with go.mod;
// it must hold engine-sim/.
func moduleRoot(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("find the sparklane module: %w", err)
		}
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				dir = d
				break
			}
			if filepath.Dir(d) == d {
				return "", fmt.Errorf("no go.mod above %s: run from the sparklane source tree, or set simimage.Options.ModuleDir / Binary", wd)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "engine-sim", "main.go")); err != nil {
		return "", fmt.Errorf("%s has no engine-sim/main.go: not the sparklane module root (set Options.ModuleDir)", dir)
	}
	return dir, nil
}

// buildContext is a tar of the Dockerfile and the binary.
func buildContext(bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Unix(0, 0)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"Dockerfile", 0o644, []byte(Dockerfile)}, {"engine-sim", 0o755, bin}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("build context: %w", err)
	}
	return buf.Bytes(), nil
}

// readBuildStream copies the build's progress to w and returns the error
// the daemon reports in the stream, if any.
func readBuildStream(r io.Reader, w io.Writer) error {
	dec := json.NewDecoder(r)
	for {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read build output: %w", err)
		}
		if m.Stream != "" {
			io.WriteString(w, m.Stream)
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return errors.New(m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return errors.New(m.Error)
		}
	}
}
