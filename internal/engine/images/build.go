package images

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/imagespec"
)

// BuildFailed: the image build itself failed (a Dockerfile step, a
// missing file, a bad argument): building again will fail the same way.
const BuildFailed = "ImageBuildFailed"

// tailLines is how many of the build log's last lines a result and a
// failure carry.
const tailLines = 20

// Builder is the part of the Docker API a build uses; *client.Client
// satisfies it.
type Builder interface {
	ImageBuild(ctx context.Context, buildContext io.Reader, options build.ImageBuildOptions) (build.ImageBuildResponse, error)
	ImageInspect(ctx context.Context, imageID string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
}

// Built is a finished build: the image's ID and the log's last lines.
type Built struct {
	ID   string   `json:"id"`
	Tail []string `json:"tail,omitempty"`
}

// gitFetchErr turns the node's Docker failing to fetch b's repository into
// an error naming the recipe key at fault: ref when the repository has no
// such ref, git otherwise.
func gitFetchErr(node, tag string, b contract.Build, err error) error {
	msg := err.Error()
	for _, noRef := range []string{"couldn't find remote ref", "did not match any", "unknown revision", "not a tree object", "reference is not a tree"} {
		if strings.Contains(msg, noRef) {
			return fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: image %s: [build] ref %q is not a branch, tag or commit of %s: %w", node, tag, b.Ref, b.Git, err))
		}
	}
	return fault.Permanent(BuildFailed, fmt.Errorf("node %s: image %s: [build] git %s: node %s's Docker could not fetch it (check the URL and that %s reaches it, with git installed beside dockerd): %w", node, tag, b.Git, node, node, err))
}

// Build builds tag on d from b (CheckBuild first; the context is read
// here, under the shared roots only, symlinks refused), calling progress
// with each log line. A failing step is a permanent BuildFailed error
// carrying the log's last lines.
func Build(ctx context.Context, d Builder, node, tag string, b contract.Build, sharedRoots []string, progress func(string)) (Built, error) {
	if err := imagespec.CheckBuild(b, sharedRoots); err != nil {
		return Built{}, fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: image %s: %w", node, tag, err))
	}
	opts := build.ImageBuildOptions{Tags: []string{tag}, Dockerfile: b.Dockerfile, Remove: true, ForceRemove: true, BuildArgs: map[string]*string{}}
	for k, v := range b.Args {
		opts.BuildArgs[k] = &v
	}
	var body io.Reader
	// refused is the context's refusal (a symlink, an unreadable file),
	// which wins over what the daemon makes of a cut-off context.
	refused := func() error { return nil }
	if b.Git != "" {
		opts.RemoteContext = b.Git + "#" + b.Ref
	} else {
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			err := tarContext(pw, b.Context)
			pw.CloseWithError(err)
			done <- err
		}()
		refused = sync.OnceValue(func() error {
			pr.Close()
			var ce contextErr
			if err := <-done; errors.As(err, &ce) {
				return fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: image %s: %w", node, tag, err))
			}
			return nil
		})
		defer refused()
		body = pr
	}
	resp, err := d.ImageBuild(ctx, body, opts)
	if err != nil {
		if rerr := refused(); rerr != nil {
			return Built{}, rerr
		}
		if b.Git != "" {
			return Built{}, gitFetchErr(node, tag, b, err)
		}
		return Built{}, fmt.Errorf("node %s: build image %s: %w", node, tag, err)
	}
	defer resp.Body.Close()
	var tail []string
	line := func(s string) {
		for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
			if l = strings.TrimRight(l, "\r"); l == "" {
				continue
			}
			tail = append(tail, l)
			if len(tail) > tailLines {
				tail = tail[1:]
			}
			if progress != nil {
				progress(l)
			}
		}
	}
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	for {
		var m struct {
			Stream      string `json:"stream"`
			Status      string `json:"status"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return Built{Tail: tail}, fmt.Errorf("node %s: build image %s: read the build log: %w", node, tag, err)
		}
		line(m.Stream + m.Status)
		if m.Error != "" {
			if rerr := refused(); rerr != nil {
				return Built{Tail: tail}, rerr
			}
			line(m.Error)
			where := b.Context
			if b.Git != "" {
				where = b.Git + "#" + b.Ref
			}
			return Built{Tail: tail}, fault.Permanent(BuildFailed, fmt.Errorf("node %s: build of image %s from %s failed: %s; last lines:\n%s", node, tag, where, m.Error, strings.Join(tail, "\n")))
		}
	}
	if rerr := refused(); rerr != nil {
		return Built{Tail: tail}, rerr
	}
	ins, err := d.ImageInspect(ctx, tag)
	if err != nil {
		return Built{Tail: tail}, fmt.Errorf("node %s: inspect built image %s: %w", node, tag, err)
	}
	return Built{ID: ins.ID, Tail: tail}, nil
}

// contextErr is a refused or unreadable context file.
type contextErr struct{ error }

// tarContext writes dir as a build context: regular files and
// directories only, each opened without following a link; a symlink
// anywhere in it (or on its path) is refused, so nothing outside the
// declared shared root is read.
func tarContext(w io.Writer, dir string) error {
	if real, err := filepath.EvalSymlinks(dir); err != nil {
		return contextErr{fmt.Errorf("[build] context %s: %w", dir, err)}
	} else if real != dir {
		return contextErr{fmt.Errorf("[build] context %s is reached through a symlink (it is %s): give the real path", dir, real)}
	}
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == "." {
			return nil
		}
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			return contextErr{fmt.Errorf("[build] context %s holds a symlink, %s: symlinks are refused (they may point outside the shared root); copy the file in", dir, rel)}
		case e.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755})
		case !e.Type().IsRegular():
			return contextErr{fmt.Errorf("[build] context %s holds %s, neither a file nor a directory: remove it", dir, rel)}
		}
		f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return contextErr{fmt.Errorf("[build] context file %s: %w", path, err)}
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: int64(st.Mode().Perm()), Size: st.Size(), ModTime: st.ModTime()}); err != nil {
			return err
		}
		_, err = io.CopyN(tw, f, st.Size())
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
