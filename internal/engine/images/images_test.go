package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/relay"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/pki"
)

// dockerClient is this machine's real Docker engine.
func dockerClient(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ping(context.Background()); err != nil {
		t.Fatalf("this machine's Docker engine: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// buildImage builds tag FROM base (or scratch) with one file of size
// random bytes, from a context made here: no registry is involved.
func buildImage(t testing.TB, c *client.Client, tag, base string, size int) image.InspectResponse {
	t.Helper()
	if base == "" {
		base = "scratch"
	}
	data := make([]byte, size)
	rand.Read(data)
	file := "f-" + randHex(4)
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	df := fmt.Sprintf("FROM %s\nCOPY %s /%s\n", base, file, file)
	for _, f := range []struct {
		name string
		b    []byte
	}{{"Dockerfile", []byte(df)}, {file, data}} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.b))})
		tw.Write(f.b)
	}
	tw.Close()
	resp, err := c.ImageBuild(context.Background(), &ctxTar, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
	if err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
	defer resp.Body.Close()
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, io.Discard, 0, false, nil); err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
	t.Cleanup(func() { removeImage(c, tag) })
	ins, err := c.ImageInspect(context.Background(), tag)
	if err != nil {
		t.Fatal(err)
	}
	return ins
}

func removeImage(c *client.Client, ref string) {
	c.ImageRemove(context.Background(), ref, image.RemoveOptions{})
}

func notTagged(t *testing.T, c *client.Client, ref string) {
	t.Helper()
	if _, err := c.ImageInspect(context.Background(), ref); !cerrdefs.IsNotFound(err) {
		t.Fatalf("%s is tagged after a refused transfer (err %v)", ref, err)
	}
}

// twoImages builds base (one layer) and top (base + one layer).
func twoImages(t *testing.T, c *client.Client) (repo string, base, top image.InspectResponse) {
	repo = "sparklane-imgtest/" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + "-" + randHex(3)
	base = buildImage(t, c, repo+":base", "", 200_000)
	top = buildImage(t, c, repo+":top", repo+":base", 50_000)
	return repo, base, top
}

func TestSendOmitsLayersTheTargetHasAndReceiveLoadsIt(t *testing.T) {
	c := dockerClient(t)
	ctx := context.Background()
	repo, base, top := twoImages(t, c)
	tag := repo + ":top"
	if len(top.RootFS.Layers) != 2 {
		t.Fatalf("top has layers %v", top.RootFS.Layers)
	}
	spec := Spec{ID: top.ID, DiffIDs: top.RootFS.Layers, From: 1, Tag: tag}
	var wire bytes.Buffer
	n, err := Send(ctx, c, spec, &wire)
	if err != nil {
		t.Fatal(err)
	}
	full := saveSize(t, c, top.ID)
	t.Logf("stream %d bytes, full docker save %d bytes", n, full)
	if n >= full-150_000 {
		t.Fatalf("stream of %d bytes carries the base layer too (full save %d)", n, full)
	}

	// The target: this daemon without top, with base.
	removeImage(c, tag)
	notTagged(t, c, tag)
	have, containerd, err := HaveLayers(ctx, c, "t", top.RootFS.Layers)
	if err != nil || containerd || have != 1 {
		t.Fatalf("HaveLayers = %d, %v, %v; want 1", have, containerd, err)
	}
	inv, err := Inspect(ctx, c, mustRef(t, tag), "t")
	if err != nil || inv.Present {
		t.Fatalf("Inspect of a removed image: %+v, %v", inv, err)
	}
	got, err := Receive(ctx, c, spec, have, bytes.NewReader(wire.Bytes()), nil, "test", "")
	if err != nil {
		t.Fatal(err)
	}
	if got.Layers != 1 || got.Bytes != n {
		t.Fatalf("received %+v, want 1 layer and %d bytes", got, n)
	}
	ins, err := c.ImageInspect(ctx, tag)
	if err != nil || ins.ID != top.ID {
		t.Fatalf("after the load %s is %s (%v), want %s", tag, ins.ID, err, top.ID)
	}
	_ = base
}

func saveSize(t *testing.T, c *client.Client, id string) int64 {
	rc, err := c.ImageSave(context.Background(), []string{id})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustRef(t testing.TB, s string) contract.ImageRef {
	r, err := contract.ParseImageRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// plan is contract.PlanImage over engine inventories, as the workflow
// plans from the nodes' answers.
func plan(ref contract.ImageRef, invs []Inventory) (contract.ImagePlan, error) {
	var c []contract.ImageInventory
	for _, inv := range invs {
		c = append(c, contract.ImageInventory(inv))
	}
	return contract.PlanImage(ref, c)
}

// imageErrType is a plan refusal's type ("" for another error).
func imageErrType(err error) string {
	var ie *contract.ImageError
	if errors.As(err, &ie) {
		return ie.Type
	}
	return ""
}

// A layer whose bytes were corrupted on the way is refused by its digest,
// and nothing is left tagged.
func TestReceiveRefusesACorruptLayer(t *testing.T) {
	c := dockerClient(t)
	ctx := context.Background()
	repo, _, top := twoImages(t, c)
	tag := repo + ":top"
	spec := Spec{ID: top.ID, DiffIDs: top.RootFS.Layers, From: 1, Tag: tag}
	var wire bytes.Buffer
	if _, err := Send(ctx, c, spec, &wire); err != nil {
		t.Fatal(err)
	}
	removeImage(c, tag)
	b := corruptLayer(t, wire.Bytes())
	_, err := Receive(ctx, c, spec, 1, bytes.NewReader(b), nil, "test", "")
	if typ, _ := fault.TypeOf(err); typ != CorruptLayer {
		t.Fatalf("corrupt layer: err %v (type %q), want %s", err, typ, CorruptLayer)
	}
	if !strings.Contains(err.Error(), "layer 2") || !strings.Contains(err.Error(), top.RootFS.Layers[1]) {
		t.Fatalf("error does not name the layer and its digest: %v", err)
	}
	notTagged(t, c, tag)
}

// corruptLayer flips one byte inside the first layer.tar of stream b.
func corruptLayer(t *testing.T, b []byte) []byte {
	tr := tar.NewReader(bytes.NewReader(b))
	var off int64
	cr := &countWriter{w: io.Discard}
	tr = tar.NewReader(io.TeeReader(bytes.NewReader(b), cr))
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no layer in the stream: %v", err)
		}
		if strings.HasSuffix(h.Name, "layer.tar") && h.Size > 1000 {
			off = cr.n + 600 // inside the content, past a header block
			break
		}
	}
	out := bytes.Clone(b)
	out[off] ^= 0xff
	return out
}

// A source whose own bytes do not match the image (its disk rotted) sends
// no manifest: the stream ends with an error.
func TestSendRefusesWrongDiffIDs(t *testing.T) {
	c := dockerClient(t)
	repo, _, top := twoImages(t, c)
	bad := bytes.Clone([]byte(top.RootFS.Layers[1]))
	bad[len(bad)-1] ^= 1
	spec := Spec{ID: top.ID, DiffIDs: []string{top.RootFS.Layers[0], string(bad)}, From: 0, Tag: repo + ":top"}
	_, err := Send(context.Background(), c, spec, io.Discard)
	if typ, _ := fault.TypeOf(err); typ != CorruptLayer {
		t.Fatalf("err %v, want %s", err, CorruptLayer)
	}
}

func TestPinnedDigestMismatchNamesNodeExpectedAndFound(t *testing.T) {
	c := dockerClient(t)
	repo, _, top := twoImages(t, c)
	pin := "sha256:" + strings.Repeat("ab", 32)
	ref := mustRef(t, repo+":top@"+pin)
	inv, err := Inspect(context.Background(), c, ref, "h1")
	if err != nil || !inv.Present || !inv.Unpinned {
		t.Fatalf("Inspect of a tag without the pinned digest: %+v, %v", inv, err)
	}
	_, err = plan(ref, []Inventory{inv, {Node: "h2"}})
	if typ := imageErrType(err); typ != DigestMismatch {
		t.Fatalf("err %v, want %s", err, DigestMismatch)
	}
	for _, want := range []string{"node h1", pin, "no repo digest", top.ID} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
	// A node that received the image from one with the digest has it
	// under the tag, same ID, no digest: it has the image.
	pinned := Inventory{Node: "h0", Present: true, ID: top.ID, DiffIDs: top.RootFS.Layers, RepoDigests: []string{repo + "@" + pin}}
	inv.DiffIDs = top.RootFS.Layers
	if p, err := plan(ref, []Inventory{pinned, inv}); err != nil || len(p.Chain) != 0 {
		t.Fatalf("a moved pinned image: plan %+v, %v", p, err)
	}
	if _, err := Inspect(context.Background(), c, mustRef(t, repo+"@"+pin), "h1"); err == nil {
		t.Fatal("repo@digest with only other images of the repo: no mismatch reported")
	}
}

// identity issues fleet identities for nodes on 127.0.0.1.
func identity(t *testing.T, dir, node string) relay.Identity {
	ca, err := pki.LoadOrCreateCA(dir, "test fleet CA")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.Peer(pki.FleetPeerPrefix+node, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return relay.Identity{CA: filepath.Join(dir, "ca.pem"), Cert: f.Cert, Key: f.Key}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A source and a receiver over mTLS: only the layer the receiver lacks
// crosses; a node with another certificate is not served.
func TestMembersOverMTLS(t *testing.T) {
	c := dockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	repo, _, top := twoImages(t, c)
	dir := t.TempDir()
	tlsOf := func(node string) (srv, cli *tlsPair) {
		id := identity(t, dir, node)
		s, err := relay.ServerTLS(id)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := relay.ClientTLS(id)
		if err != nil {
			t.Fatal(err)
		}
		return &tlsPair{s, cl}, nil
	}
	h1, _ := tlsOf("h1")
	h2, _ := tlsOf("h2")
	h3, _ := tlsOf("h3")
	addr := freeAddr(t)
	// The copy goes to another tag on this same daemon: every layer is
	// here, so the load skips them all; what crossed is counted.
	spec := Spec{ID: top.ID, DiffIDs: top.RootFS.Layers, From: 1, Tag: repo + ":copy"}
	t.Cleanup(func() { removeImage(c, spec.Tag) })
	src := Member{Docker: c, Node: "h1", Spec: spec, Downstream: "h2", ListenAddr: addr, ServerTLS: h1.srv, ClientTLS: h1.cli, Wait: time.Minute}
	type res struct {
		m   Moved
		err error
	}
	done := make(chan res, 1)
	go func() { m, err := src.Run(ctx); done <- res{m, err} }()

	// h3 is not the planned downstream: its connection is not served.
	intruder := Member{Docker: c, Node: "h3", Spec: spec, Have: 1, Upstream: "h1", UpstreamAddr: addr, ClientTLS: h3.cli, Wait: 3 * time.Second}
	if _, err := intruder.Run(ctx); err == nil {
		t.Fatal("h3 received a transfer planned for h2")
	}
	dst := Member{Docker: c, Node: "h2", Spec: spec, Have: 1, Upstream: "h1", UpstreamAddr: addr, ServerTLS: h2.srv, ClientTLS: h2.cli, Wait: time.Minute}
	got, err := dst.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got.Layers != 1 || got.BytesIn != r.m.BytesOut || got.BytesIn > 120_000 {
		t.Fatalf("received %+v, sent %+v: want one layer of ~50 kB", got, r.m)
	}
	ins, err := c.ImageInspect(ctx, spec.Tag)
	if err != nil || ins.ID != top.ID {
		t.Fatalf("%s is %s (%v)", spec.Tag, ins.ID, err)
	}
	// The listener is gone with the transfer.
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Fatalf("%s still listens after the transfer", addr)
	}
}

type tlsPair struct{ srv, cli *tls.Config }

// A node that lacks both layers loads them one by one (durable.go): a
// corrupt layer is refused by its digest and the image is not tagged;
// the good stream then loads it, and no helper tag is left.
func TestReceiveLayerByLayer(t *testing.T) {
	c := dockerClient(t)
	ctx := context.Background()
	repo, _, top := twoImages(t, c)
	tag := repo + ":top"
	spec := Spec{ID: top.ID, DiffIDs: top.RootFS.Layers, From: 0, Tag: tag}
	var wire bytes.Buffer
	if _, err := Send(ctx, c, spec, &wire); err != nil {
		t.Fatal(err)
	}
	removeImage(c, tag)
	removeImage(c, repo+":base")
	if have, _, err := HaveLayers(ctx, c, "t", top.RootFS.Layers); err != nil || have != 0 || !durable(spec, have) {
		t.Fatalf("HaveLayers = %d, %v; want 0 (a layer-by-layer receive)", have, err)
	}
	_, err := Receive(ctx, c, spec, 0, bytes.NewReader(corruptLayer(t, wire.Bytes())), nil, "test", t.TempDir())
	if typ, _ := fault.TypeOf(err); typ != CorruptLayer {
		t.Fatalf("corrupt layer: err %v (type %q), want %s", err, typ, CorruptLayer)
	}
	notTagged(t, c, tag)
	have, _, err := HaveLayers(ctx, c, "t", top.RootFS.Layers)
	if err != nil {
		t.Fatal(err)
	}
	spool := t.TempDir()
	got, err := Receive(ctx, c, spec, have, bytes.NewReader(wire.Bytes()), nil, "test", spool)
	if err != nil {
		t.Fatal(err)
	}
	if got.Layers != 2 {
		t.Fatalf("received %+v, want 2 layers", got)
	}
	if ins, err := c.ImageInspect(ctx, tag); err != nil || ins.ID != top.ID {
		t.Fatalf("after the load %s is %s (%v), want %s", tag, ins.ID, err, top.ID)
	}
	l, err := c.ImageList(ctx, image.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range l {
		for _, rt := range s.RepoTags {
			if strings.HasPrefix(rt, PartialRepo+short(top.ID)) {
				t.Errorf("helper tag %s left after the load", rt)
			}
		}
	}
	if ents, _ := os.ReadDir(spool); len(ents) != 0 {
		t.Errorf("spool not emptied: %d entries", len(ents))
	}
}
