package images

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
)

// PartialRepo starts the repository of the helper tags that keep a
// transfer's progress in a receiver's Docker: after layer k of image ID
// is verified and loaded, the node holds an image tagged
// PartialRepo+short(ID)+":"+(k+1) whose layers are the image's first k+1.
// HaveLayers counts them like any image's, so a transfer planned again
// after an interruption starts above them. The final load removes them;
// image listings ignore them.
const PartialRepo = "sparklane-partial/"

// durable reports whether a receive loads layer by layer: when the node
// lacks more than one of the image's layers (with one, the final load is
// the only one).
func durable(spec Spec, have int) bool { return len(spec.DiffIDs)-have > 1 }

func partialTag(id string, layers int) string {
	return PartialRepo + short(id) + ":" + strconv.Itoa(layers)
}

// stager spools the verified files of a stream under dir and loads the
// image's layers in chain order as they become loadable, each as a helper
// image holding the layers below it (see PartialRepo); the last layer and
// the config go with the final load, which tags the image.
type stager struct {
	ctx   context.Context
	d     Docker
	spec  Spec
	dir   string
	n     int
	items chan stagedLayer
	done  chan error
	// durable is the receiver's Member.Durable seam (nil: none).
	durable func(spec Spec, layers int) error

	mu     sync.Mutex
	config string         // spool path of the config
	layers map[int]string // chain index → spool path, loaded or not
	next   int            // the first layer not yet in the daemon
}

type stagedLayer struct {
	index int
	path  string
}

func newStager(ctx context.Context, rc receiver, dir string) *stager {
	spec := rc.spec
	st := &stager{ctx: ctx, d: rc.d, spec: spec, dir: dir, n: len(spec.DiffIDs), next: rc.have, durable: rc.durable,
		items: make(chan stagedLayer, len(spec.DiffIDs)+1), done: make(chan error, 1), layers: map[int]string{}}
	go func() { st.done <- st.loadInOrder() }()
	return st
}

// file is where the next file of the stream is spooled.
func (st *stager) file() (*os.File, error) {
	return os.CreateTemp(st.dir, "f-")
}

// took records a spooled file once its digest is known: the config, or
// a layer this node lacks (queued for loading); any other is dropped.
func (st *stager) took(path, digest string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if digest == st.spec.ID {
		st.config = path
		return
	}
	used := false
	for i := st.next; i < st.n; i++ {
		if st.spec.DiffIDs[i] == digest {
			if _, ok := st.layers[i]; !ok {
				st.layers[i] = path
				used = true
				if i < st.n-1 {
					st.items <- stagedLayer{i, path}
				}
			}
		}
	}
	if !used {
		os.Remove(path)
	}
}

// loadInOrder loads each queued layer below the last as soon as the
// layers under it are in the daemon, until the queue is closed.
func (st *stager) loadInOrder() error {
	ready := map[int]string{}
	for it := range st.items {
		ready[it.index] = it.path
		for {
			st.mu.Lock()
			k := st.next
			st.mu.Unlock()
			p, ok := ready[k]
			if !ok {
				break
			}
			delete(ready, k)
			if err := st.loadPartial(k, p); err != nil {
				for range st.items { // drain: took must not block
				}
				return err
			}
			st.mu.Lock()
			st.next = k + 1
			st.mu.Unlock()
			if st.durable != nil {
				if err := st.durable(st.spec, k+1); err != nil {
					for range st.items {
					}
					return err
				}
			}
		}
	}
	return nil
}

// loadPartial loads layer k (its file at p) on top of the k layers the
// daemon has, as a helper image holding the first k+1, then removes the
// helper tags below it.
func (st *stager) loadPartial(k int, p string) error {
	cfg, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": st.spec.DiffIDs[:k+1]},
	})
	if err != nil {
		return err
	}
	paths := make([]string, k+1)
	for i := range paths {
		paths[i] = "l" + strconv.Itoa(i) + "/layer.tar"
	}
	tag := partialTag(st.spec.ID, k+1)
	man, _ := json.Marshal([]saveManifest{{Config: "partial.json", RepoTags: []string{tag}, Layers: paths}})
	files := []tarFile{{name: paths[k], path: p}, {name: "partial.json", data: cfg}, {name: "manifest.json", data: man}}
	if err := loadFiles(st.ctx, st.d, files); err != nil {
		return fmt.Errorf("image %s: load layer %d (%s): %w", st.spec.ID, k+1, st.spec.DiffIDs[k], err)
	}
	st.dropFile(k, p)
	dropPartials(st.ctx, st.d, st.spec.ID, tag)
	return nil
}

// dropFile removes layer k's spool file unless another layer still needs
// it (the same diffID twice).
func (st *stager) dropFile(k int, p string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, q := range st.layers {
		if i > k && q == p {
			return
		}
	}
	os.Remove(p)
}

// close ends the queue and waits for the layer loads.
func (st *stager) close() error {
	close(st.items)
	return <-st.done
}

// final loads the image: its config, its last layer and m (the stream's
// manifest, verified), on top of the layers the helpers hold.
func (st *stager) final(m saveManifest) error {
	st.mu.Lock()
	next, cfg, last := st.next, st.config, st.layers[st.n-1]
	st.mu.Unlock()
	if next != st.n-1 || cfg == "" || last == "" {
		return fmt.Errorf("image %s: %d of %d layers loaded before the last one: plan again", st.spec.ID, next, st.n)
	}
	man, _ := json.Marshal([]saveManifest{{Config: m.Config, RepoTags: []string{st.spec.Tag}, Layers: m.Layers}})
	files := []tarFile{{name: m.Config, path: cfg}, {name: m.Layers[st.n-1], path: last}, {name: "manifest.json", data: man}}
	return loadFiles(st.ctx, st.d, files)
}

// tarFile is one file of a tarball loadFiles writes: data, or the file at
// path.
type tarFile struct {
	name, path string
	data       []byte
}

// loadFiles runs `docker load` of a tarball of files.
func loadFiles(ctx context.Context, d Docker, files []tarFile) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, files)) }()
	err := load(ctx, d, pr)
	pr.CloseWithError(fmt.Errorf("docker load ended (%v)", err))
	return err
}

func writeTar(w io.Writer, files []tarFile) error {
	tw := tar.NewWriter(w)
	for _, f := range files {
		var r io.Reader
		size := int64(len(f.data))
		if f.path != "" {
			fh, err := os.Open(f.path)
			if err != nil {
				return err
			}
			defer fh.Close()
			fi, err := fh.Stat()
			if err != nil {
				return err
			}
			r, size = fh, fi.Size()
		} else {
			r = strings.NewReader(string(f.data))
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := io.Copy(tw, r); err != nil {
			return err
		}
	}
	return tw.Close()
}

// dropPartials removes image id's helper tags but keep ("": all): the
// layers stay, held by the helper kept or the image itself. Best effort:
// a helper left behind only holds layers of the image, and listings
// ignore it.
func dropPartials(ctx context.Context, d Docker, id, keep string) {
	l, err := d.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("reference", PartialRepo+short(id)))})
	if err != nil {
		return
	}
	for _, s := range l {
		for _, t := range s.RepoTags {
			if t == keep || !strings.HasPrefix(t, PartialRepo+short(id)+":") {
				continue
			}
			if _, err := d.ImageRemove(ctx, t, image.RemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
				continue
			}
		}
	}
}

const spoolPrefix = "sparklane-image-"

// dropStaleSpools removes the spools under spool ("": the temporary
// directory) that no transfer touched for longer than a transfer may run:
// those of a worker killed mid-transfer.
func dropStaleSpools(spool string) {
	if spool == "" {
		spool = os.TempDir()
	}
	ents, err := os.ReadDir(spool)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), spoolPrefix) {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > 6*time.Hour {
			os.RemoveAll(filepath.Join(spool, e.Name()))
		}
	}
}

// runDurable is Receive for a node that lacks more than one layer:
// the stream's files are spooled under spool as they are verified, and
// each layer is loaded as soon as the layers below it are (see stager),
// so an interrupted transfer leaves the loaded prefix in the daemon.
func (rc receiver) runDurable(ctx context.Context, r io.Reader, fwd io.Writer) (Received, error) {
	d, spec, from, spool := rc.d, rc.spec, rc.from, rc.spool
	var got Received
	dropStaleSpools(spool)
	dir, err := os.MkdirTemp(spool, spoolPrefix)
	if err != nil {
		return got, fmt.Errorf("image %s: spool for the stream from %s: %w", spec.ID, from, err)
	}
	defer os.RemoveAll(dir)
	st := newStager(ctx, rc, dir)
	m, err := readStream(spec, r, fwd, fwd, &got, from, st)
	if lerr := st.close(); err == nil {
		err = lerr
	}
	if err != nil {
		return got, err
	}
	if err := st.final(*m); err != nil {
		return got, fmt.Errorf("docker load of image %s from %s: %w", spec.ID, from, err)
	}
	if err := checkLoaded(ctx, d, spec, from); err != nil {
		return got, err
	}
	dropPartials(ctx, d, spec.ID, "")
	return got, nil
}
