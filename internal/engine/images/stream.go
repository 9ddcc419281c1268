package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/sparklane/sparklane/internal/fault"
)

// Spec is what one transfer moves: the image (its ID and diffIDs, as the
// plan found them on the source), the first layer the stream carries, and
// the tag the receivers load it under.
type Spec struct {
	ID      string   `json:"id"`
	DiffIDs []string `json:"diff_ids"`
	From    int      `json:"from"`
	Tag     string   `json:"tag"`
}

func (s Spec) check() error {
	if s.ID == "" || s.Tag == "" || s.From < 0 || s.From > len(s.DiffIDs) {
		return fmt.Errorf("image transfer spec incomplete (id %q, tag %q, from %d of %d layers)", s.ID, s.Tag, s.From, len(s.DiffIDs))
	}
	return nil
}

// saveManifest is one entry of a `docker save` tarball's manifest.json.
type saveManifest struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

const maxManifest = 4 << 20

// layouts caches savedLayout by daemon and image ID: the save of an image
// by one daemon names its layers the same way every time, and reading it
// costs one local pass over the whole image.
var layouts sync.Map

// cachedLayout is savedLayout, read once per daemon and image.
func cachedLayout(ctx context.Context, d Docker, id string) (saveManifest, string, error) {
	info, err := d.Info(ctx)
	if err != nil {
		return saveManifest{}, "", fmt.Errorf("docker info: %w", err)
	}
	key := info.ID + "/" + id
	if m, ok := layouts.Load(key); ok {
		return m.(saveManifest), key, nil
	}
	m, err := savedLayout(ctx, d, id)
	if err != nil {
		return m, key, err
	}
	layouts.Store(key, m)
	return m, key, nil
}

// savedLayout reads `docker save ID` to its end for its manifest: which
// path holds which layer (the save names layers by legacy IDs, and its
// manifest comes last).
func savedLayout(ctx context.Context, d Docker, id string) (saveManifest, error) {
	rc, err := d.ImageSave(ctx, []string{id})
	if err != nil {
		return saveManifest{}, fmt.Errorf("docker save %s: %w", id, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var m *saveManifest
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return saveManifest{}, fmt.Errorf("docker save %s: %w", id, err)
		}
		if h.Name == "manifest.json" {
			if m, err = readManifest(tr, h.Size); err != nil {
				return saveManifest{}, fmt.Errorf("docker save %s: %w", id, err)
			}
		}
	}
	if m == nil {
		return saveManifest{}, fmt.Errorf("docker save %s wrote no manifest.json: this Docker's save format is not supported", id)
	}
	return *m, nil
}

func readManifest(r io.Reader, size int64) (*saveManifest, error) {
	if size > maxManifest {
		return nil, fmt.Errorf("manifest.json of %d bytes (more than %d)", size, maxManifest)
	}
	b, err := io.ReadAll(io.LimitReader(r, size))
	if err != nil {
		return nil, fmt.Errorf("read manifest.json: %w", err)
	}
	var ms []saveManifest
	if err := json.Unmarshal(b, &ms); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if len(ms) != 1 {
		return nil, fmt.Errorf("manifest.json lists %d images, expected 1", len(ms))
	}
	return &ms[0], nil
}

// Send writes to w the stream of spec's image from d (the source node's
// Docker): its `docker save` without the layers below spec.From (and
// their legacy files), ending with a manifest.json that tags it
// spec.Tag. Every file it sends is hashed: a config or layer whose bytes
// do not match their digest (a corrupt source) ends the stream with an
// error before its manifest, so no receiver loads anything. It returns the
// bytes written.
func Send(ctx context.Context, d Docker, spec Spec, w io.Writer) (n int64, err error) {
	if err := spec.check(); err != nil {
		return 0, err
	}
	skip := map[string]bool{}
	skipDir := map[string]bool{}
	if spec.From > 0 {
		m, key, err := cachedLayout(ctx, d, spec.ID)
		if err != nil {
			return 0, err
		}
		defer func() {
			if err != nil {
				layouts.Delete(key) // read it again next time
			}
		}()
		if len(m.Layers) != len(spec.DiffIDs) {
			return 0, fmt.Errorf("docker save %s lists %d layers, the image has %d", spec.ID, len(m.Layers), len(spec.DiffIDs))
		}
		keep := map[string]bool{}
		for _, p := range m.Layers[spec.From:] {
			keep[p] = true
		}
		for _, p := range m.Layers[:spec.From] {
			if keep[p] {
				continue
			}
			skip[p] = true
			if dir, ok := strings.CutSuffix(p, "/layer.tar"); ok {
				skipDir[dir] = true
			}
		}
	}
	rc, err := d.ImageSave(ctx, []string{spec.ID})
	if err != nil {
		return 0, fmt.Errorf("docker save %s: %w", spec.ID, err)
	}
	defer rc.Close()
	cw := &countWriter{w: w}
	tw := tar.NewWriter(cw)
	tr := tar.NewReader(rc)
	sums := newSums()
	var m *saveManifest
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return cw.n, fmt.Errorf("docker save %s: %w", spec.ID, err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		top, _, _ := strings.Cut(name, "/")
		switch {
		case name == "manifest.json":
			if m, err = readManifest(tr, h.Size); err != nil {
				return cw.n, fmt.Errorf("docker save %s: %w", spec.ID, err)
			}
			continue
		case name == "repositories" || name == "index.json" || name == "oci-layout":
			continue // tags and OCI index: the manifest we write says all
		case skip[name] || skipDir[top]:
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return cw.n, err
		}
		if err := sums.add(h, name, tr, tw); err != nil {
			return cw.n, fmt.Errorf("docker save %s: %s: %w", spec.ID, name, err)
		}
	}
	if m == nil {
		return cw.n, fmt.Errorf("docker save %s wrote no manifest.json: this Docker's save format is not supported", spec.ID)
	}
	if err := sums.verify(*m, spec, "the source's docker save"); err != nil {
		return cw.n, err
	}
	out := []saveManifest{{Config: m.Config, RepoTags: []string{spec.Tag}, Layers: m.Layers}}
	b, _ := json.Marshal(out)
	if err := tw.WriteHeader(&tar.Header{Name: "manifest.json", Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
		return cw.n, err
	}
	if _, err := tw.Write(b); err != nil {
		return cw.n, err
	}
	if err := tw.Close(); err != nil {
		return cw.n, err
	}
	return cw.n, nil
}

// sums are the digests of the files of a stream, by path.
type sums struct {
	files map[string]string // path → sha256:HEX
	links map[string]string // path → the path it links to
	h     hash.Hash
}

func newSums() *sums {
	return &sums{files: map[string]string{}, links: map[string]string{}, h: sha256.New()}
}

// add records entry h (name cleaned) read from r, copying its content to
// w (nil: none). Only files, directories and links to files of the same
// stream are allowed.
func (s *sums) add(h *tar.Header, name string, r io.Reader, w io.Writer) error {
	if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") {
		return fmt.Errorf("unsafe path %q in the image stream", h.Name)
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return nil
	case tar.TypeSymlink:
		s.links[name] = path.Clean(path.Join(path.Dir(name), h.Linkname))
		return nil
	case tar.TypeReg:
		s.h.Reset()
		dst := io.Writer(s.h)
		if w != nil {
			dst = io.MultiWriter(s.h, w)
		}
		if _, err := io.Copy(dst, r); err != nil {
			return err
		}
		s.files[name] = "sha256:" + hex.EncodeToString(s.h.Sum(nil))
		return nil
	default:
		return fmt.Errorf("entry %q of type %q in the image stream: only files, directories and links are expected", h.Name, h.Typeflag)
	}
}

// digest is the digest of the file at p, following one link.
func (s *sums) digest(p string) (string, bool) {
	if t, ok := s.links[p]; ok {
		p = t
	}
	d, ok := s.files[p]
	return d, ok
}

// verify checks m against spec and the digests seen: the config hashes to
// the image ID, the layers from spec.From on to their diffIDs, in order.
func (s *sums) verify(m saveManifest, spec Spec, from string) error {
	if d, ok := s.digest(m.Config); !ok {
		return fault.Permanent(CorruptLayer, fmt.Errorf("image %s: %s carries no config %s", spec.ID, from, m.Config))
	} else if d != spec.ID {
		return fault.Permanent(CorruptLayer, fmt.Errorf("image %s: the config from %s hashes to %s: corrupt bytes; nothing was loaded", spec.ID, from, d))
	}
	if len(m.Layers) != len(spec.DiffIDs) {
		return fault.Permanent(CorruptLayer, fmt.Errorf("image %s: %s lists %d layers, expected %d", spec.ID, from, len(m.Layers), len(spec.DiffIDs)))
	}
	for i := spec.From; i < len(m.Layers); i++ {
		d, ok := s.digest(m.Layers[i])
		if !ok {
			return fault.Permanent(CorruptLayer, fmt.Errorf("image %s: %s lacks layer %d (%s)", spec.ID, from, i+1, spec.DiffIDs[i]))
		}
		if d != spec.DiffIDs[i] {
			return fault.Permanent(CorruptLayer, fmt.Errorf("image %s: layer %d from %s hashes to %s, expected %s: corrupt bytes; nothing was loaded", spec.ID, i+1, from, d, spec.DiffIDs[i]))
		}
	}
	return nil
}

// Received is what a receiver took in.
type Received struct {
	// Bytes is the stream's size on the wire (before TLS).
	Bytes int64 `json:"bytes"`
	// Layers is how many layer files the stream carried.
	Layers int `json:"layers"`
}

// Receive reads spec's image stream from r, verifies every file of it,
// and loads it into d (this node's Docker), copying the raw stream to fwd
// (the next node of the chain; nil: none) as it goes. have is how many of
// the image's layers this node already has: the stream must carry the
// rest. A file that does not match its digest aborts the load before the
// stream's manifest reaches the daemon, so nothing is loaded or tagged.
// After the load the tag must name spec.ID. Once the stream has ended and
// is all forwarded, fwd's write side is ended (when it has one, as a
// *tls.Conn does) before this node's load is waited for, so the nodes of
// a chain load at once; each node's failure is its own member's error.
//
// A node that lacks more than one layer loads them one by one as they are
// verified (spooled under spool, "" the system's temporary directory), so
// an interrupted transfer keeps what it loaded (see PartialRepo).
func Receive(ctx context.Context, d Docker, spec Spec, have int, r io.Reader, fwd io.Writer, from, spool string) (Received, error) {
	return receiver{d: d, spec: spec, have: have, from: from, spool: spool}.run(ctx, r, fwd)
}

// receiver is one node's side of an image stream: Receive's arguments
// but the stream's two ends, and a Member's Durable seam.
type receiver struct {
	d     Docker
	spec  Spec
	have  int
	from  string
	spool string
	// durable runs after each layer is made durable (Member.Durable; nil:
	// nothing).
	durable func(spec Spec, layers int) error
}

// run is Receive.
func (rc receiver) run(ctx context.Context, r io.Reader, fwd io.Writer) (Received, error) {
	d, spec, have, from := rc.d, rc.spec, rc.have, rc.from
	var got Received
	if err := spec.check(); err != nil {
		return got, err
	}
	if have < spec.From {
		return got, fmt.Errorf("image %s: this node has %d of its layers, the stream from %s starts at layer %d: plan again", spec.ID, have, from, spec.From+1)
	}
	if durable(spec, have) {
		return rc.runDurable(ctx, r, fwd)
	}
	pr, pw := io.Pipe()
	loaded := make(chan error, 1)
	go func() {
		err := load(ctx, d, pr)
		// A daemon that stopped reading must not leave the writer blocked.
		pr.CloseWithError(fmt.Errorf("docker load ended (%v)", err))
		loaded <- err
	}()
	var sink io.Writer = pw
	if fwd != nil {
		sink = io.MultiWriter(pw, fwd)
	}
	_, err := readStream(spec, r, sink, fwd, &got, from, nil)
	if err != nil {
		pw.CloseWithError(err)
		<-loaded
		return got, err
	}
	pw.Close()
	if err := <-loaded; err != nil {
		return got, fmt.Errorf("docker load of image %s from %s: %w", spec.ID, from, err)
	}
	if err := checkLoaded(ctx, d, spec, from); err != nil {
		return got, err
	}
	// An earlier, interrupted receive may have left helper tags (the
	// layers it loaded are what made this one a single-layer load).
	dropPartials(ctx, d, spec.ID, "")
	return got, nil
}

// readStream reads and verifies the whole stream from r (receive, then
// the tar trailer), copying it to sink as it goes (nil: nowhere), counts
// its bytes in got.Bytes, and once all of it went through ends fwd's
// write side, so the next node loads while this one does, not after.
func readStream(spec Spec, r io.Reader, sink, fwd io.Writer, got *Received, from string, st *stager) (*saveManifest, error) {
	cr := &countWriter{w: io.Discard}
	src := io.TeeReader(r, cr)
	if sink != nil {
		src = io.TeeReader(src, sink)
	}
	m, err := receive(spec, src, got, from, st)
	if err == nil {
		// The tar trailer: the daemon's untar ends only with it.
		_, err = io.Copy(io.Discard, src)
	}
	got.Bytes = cr.n
	if err == nil {
		err = endStream(fwd)
	}
	return m, err
}

// checkLoaded checks that spec.Tag names spec.ID after its load.
func checkLoaded(ctx context.Context, d Docker, spec Spec, from string) error {
	ins, err := d.ImageInspect(ctx, spec.Tag)
	if err != nil {
		return fmt.Errorf("image %s loaded from %s but %s cannot be inspected: %w", spec.ID, from, spec.Tag, err)
	}
	if ins.ID != spec.ID {
		return fault.Permanent(DigestMismatch, fmt.Errorf("image %s loaded from %s, but %s names %s here", spec.ID, from, spec.Tag, ins.ID))
	}
	return nil
}

// receive walks the stream and checks it; the manifest must come last.
// With st, every file is spooled through it.
func receive(spec Spec, src io.Reader, got *Received, from string, st *stager) (*saveManifest, error) {
	tr := tar.NewReader(src)
	sums := newSums()
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("image %s: the stream from %s ended without its manifest", spec.ID, from)
		}
		if err != nil {
			return nil, fmt.Errorf("image %s: stream from %s: %w", spec.ID, from, err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name != "manifest.json" {
			if err := spoolFile(sums, st, h, name, tr); err != nil {
				return nil, fmt.Errorf("image %s from %s: %w", spec.ID, from, err)
			}
			if h.Typeflag == tar.TypeReg && (strings.HasSuffix(name, "/layer.tar") || strings.HasPrefix(name, "blobs/")) && "sha256:"+path.Base(name) != spec.ID {
				got.Layers++
			}
			continue
		}
		m, err := readManifest(tr, h.Size)
		if err != nil {
			return nil, fmt.Errorf("image %s from %s: %w", spec.ID, from, err)
		}
		if len(m.RepoTags) != 1 || m.RepoTags[0] != spec.Tag {
			return nil, fault.Permanent(DigestMismatch, fmt.Errorf("image %s from %s is tagged %v, expected %s", spec.ID, from, m.RepoTags, spec.Tag))
		}
		if err := sums.verify(*m, spec, from); err != nil {
			return nil, err
		}
		h, err = tr.Next()
		if !errors.Is(err, io.EOF) {
			if err == nil {
				err = fmt.Errorf("entry %q after the manifest", h.Name)
			}
			return nil, fmt.Errorf("image %s from %s: %w", spec.ID, from, err)
		}
		return m, nil
	}
}

// spoolFile hashes entry h of the stream into sums and, with st, spools
// a regular file's bytes and hands it to st with its digest.
func spoolFile(sums *sums, st *stager, h *tar.Header, name string, r io.Reader) error {
	if st == nil || h.Typeflag != tar.TypeReg {
		return sums.add(h, name, r, nil)
	}
	f, err := st.file()
	if err != nil {
		return fmt.Errorf("spool %s: %w", name, err)
	}
	err = sums.add(h, name, r, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return err
	}
	st.took(f.Name(), sums.files[name])
	return nil
}

// load runs `docker load` of r (quiet) and returns its error, including
// one the daemon reports in its message stream.
func load(ctx context.Context, d Docker, r io.Reader) error {
	resp, err := d.ImageLoad(ctx, r, client.ImageLoadWithQuiet(true))
	if err != nil {
		io.Copy(io.Discard, r) // unblock the writer; its error wins
		return err
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, &out, 0, false, nil); err != nil {
		return err
	}
	return nil
}

// closeWriter is a stream's write side that can be ended on its own
// (*tls.Conn: a close_notify, then the TCP FIN).
type closeWriter interface{ CloseWrite() error }

// endStream ends w's write side when it has one: its reader sees the end
// of the stream at once, not when this node's load returns and the
// connection closes.
func endStream(w io.Writer) error {
	if c, ok := w.(closeWriter); ok {
		if err := c.CloseWrite(); err != nil {
			return fmt.Errorf("end the stream to the next node: %w", err)
		}
	}
	return nil
}

// countWriter counts the bytes written through it to w; the one byte
// counter of the streams: a sender counts what it writes, a receiver
// what it reads with io.TeeReader(r, &countWriter{w: io.Discard}).
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// CloseWrite ends the write side of the writer it counts, if it has one.
func (c *countWriter) CloseWrite() error { return endStream(c.w) }
