package images

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/regtest"
)

// daemonJSON is the hash of this machine's /etc/docker/daemon.json ("" when
// there is none): a pull must never need it changed.
func daemonJSON(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/etc/docker/daemon.json")
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return string(s[:])
}

// pullRepo is a repository name of this test, removed from the machine's
// Docker (every tag) when it ends.
func pullRepo(t *testing.T, c *client.Client) string {
	repo := "sparklane-pulltest/" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + "-" + randHex(3)
	t.Cleanup(func() {
		l, _ := c.ImageList(context.Background(), image.ListOptions{})
		for _, s := range l {
			for _, tag := range s.RepoTags {
				if strings.Contains(tag, repo) {
					removeImage(c, tag)
				}
			}
		}
	})
	return repo
}

func configID(t *testing.T, img v1.Image) string {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func wantType(t *testing.T, what string, err error, typ string, parts ...string) {
	t.Helper()
	t.Logf("%s: %v", what, err)
	if got, _ := fault.TypeOf(err); err == nil || got != typ {
		t.Fatalf("%s: %v (type %q), want type %s", what, err, got, typ)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want it to say %q", what, err, p)
		}
	}
}

// The registry an image names (a real docker-registry on loopback, plain
// HTTP): sparklane's client pulls it into this machine's Docker, checks a
// pin, tags it with its digest tag so Inspect knows it pinned; a second
// pull fetches nothing; a wrong pin or a missing tag is refused naming
// node and registry; an index yields this machine's platform, an index
// without it is refused naming the platforms it has. daemon.json is not
// touched.
func TestPullFromARegistryIntoDocker(t *testing.T) {
	c := dockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	before := daemonJSON(t)
	reg := regtest.Start(t, ctx, regtest.Options{})
	repo := pullRepo(t, c)
	img := regtest.Image(t, "", []int{300_000, 100_000}, "/f0")
	digest := reg.Push(t, ctx, repo+":1", img)
	ref := contract.MustImageRef(reg.Host + "/" + repo + ":1@" + digest)
	s := PullSpec{Node: "n1", Ref: ref, Registry: ref.Registry(), ConfigFile: "/etc/sparklane/sparklane.toml"}
	var lines []string
	p, err := Pull(ctx, c, s, PullOptions{Progress: func(l string) { lines = append(lines, l) }})
	if err != nil {
		t.Fatal(err)
	}
	if p.ID != configID(t, img) || p.Digest != digest || p.Layers != 2 || p.Bytes == 0 || p.Platform != "linux/"+runtime.GOARCH || len(lines) != 2 {
		t.Fatalf("pulled %+v, progress %q", p, lines)
	}
	inv, err := Inspect(ctx, c, ref, "n1")
	if err != nil || !inv.Present || inv.Unpinned || inv.ID != p.ID {
		t.Fatalf("the pulled pin: %+v %v, want present and pinned", inv, err)
	}
	if ins, err := c.ImageInspect(ctx, DigestTag(ref)); err != nil || ins.ID != p.ID {
		t.Fatalf("digest tag %s: %v", DigestTag(ref), err)
	}
	again, err := Pull(ctx, c, s, PullOptions{})
	if err != nil || again.Layers != 0 || again.Bytes != 0 || again.ID != p.ID {
		t.Fatalf("second pull: %+v %v, want nothing fetched", again, err)
	}

	wrong := "sha256:" + strings.Repeat("0", 64)
	s.Ref = contract.MustImageRef(reg.Host + "/" + repo + ":1@" + wrong)
	_, err = Pull(ctx, c, s, PullOptions{})
	wantType(t, "a wrong pin", err, DigestMismatch, "node n1", "pinned "+wrong, "the registry serves "+digest)

	s.Ref = contract.MustImageRef(reg.Host + "/" + repo + ":missing")
	_, err = Pull(ctx, c, s, PullOptions{})
	wantType(t, "a missing tag", err, fault.ImageMissing, "node n1", "registry "+reg.Host+" has no", "docker push")
	notTagged(t, c, s.Ref.Name)

	// An index: this machine's platform is taken.
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	mine := regtest.Image(t, "", []int{50_000})
	reg.PushIndex(t, ctx, repo+":multi", map[string]v1.Image{"linux/" + runtime.GOARCH: mine, "linux/" + other: regtest.Image(t, "linux/"+other, []int{60_000})})
	s.Ref = contract.MustImageRef(reg.Host + "/" + repo + ":multi")
	if p, err := Pull(ctx, c, s, PullOptions{}); err != nil || p.ID != configID(t, mine) {
		t.Fatalf("index: %+v %v, want %s", p, err, configID(t, mine))
	}
	reg.PushIndex(t, ctx, repo+":foreign", map[string]v1.Image{"linux/" + other: regtest.Image(t, "linux/"+other, []int{60_000})})
	s.Ref = contract.MustImageRef(reg.Host + "/" + repo + ":foreign")
	_, err = Pull(ctx, c, s, PullOptions{})
	wantType(t, "an index without this platform", err, fault.InvalidSpec, "node n1", "no image for this node's platform linux/"+runtime.GOARCH, "linux/"+other)
	if after := daemonJSON(t); after != before {
		t.Errorf("daemon.json changed")
	}
}

// A pull stopped after its first layers were loaded (the Durable fault
// point, as a killed worker) keeps them: the next pull fetches only the
// others, and leaves no helper tag.
func TestPullResumesAboveTheLayersItLoaded(t *testing.T) {
	c := dockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	reg := regtest.Start(t, ctx, regtest.Options{})
	repo := pullRepo(t, c)
	img := regtest.Image(t, "", []int{100_000, 110_000, 120_000, 130_000})
	reg.Push(t, ctx, repo+":4", img)
	ref := contract.MustImageRef(reg.Host + "/" + repo + ":4")
	s := PullSpec{Node: "n1", Ref: ref, Registry: ref.Registry()}
	killed := errors.New("worker killed")
	_, err := Pull(ctx, c, s, PullOptions{Jobs: 1, Durable: func(_ Spec, layers int) error {
		if layers == 2 {
			return killed
		}
		return nil
	}})
	if !errors.Is(err, killed) {
		t.Fatalf("stopped pull: %v", err)
	}
	t.Cleanup(func() { dropPartials(context.Background(), c, configID(t, img), "") })
	diff, _ := img.ConfigFile()
	var diffIDs []string
	for _, d := range diff.RootFS.DiffIDs {
		diffIDs = append(diffIDs, d.String())
	}
	if n, _, err := HaveLayers(ctx, c, "n1", diffIDs); err != nil || n != 2 {
		t.Fatalf("after the stop the node has %d layers (%v), want 2", n, err)
	}
	p, err := Pull(ctx, c, s, PullOptions{})
	if err != nil || p.Layers != 2 || p.ID != configID(t, img) {
		t.Fatalf("resumed pull: %+v %v, want the 2 layers left", p, err)
	}
	l, _ := c.ImageList(ctx, image.ListOptions{})
	for _, s := range l {
		for _, tag := range s.RepoTags {
			if strings.HasPrefix(tag, PartialRepo+short(p.ID)) {
				t.Errorf("helper tag %s left", tag)
			}
		}
	}
}

// Transport and login, each against a real registry: a plain-HTTP one
// not on this node's loopback (127.0.0.2) is refused naming the key to
// set, and pulled once listed; one that needs a login refuses an
// anonymous pull and wrong credentials (naming the auth file) and serves
// the right ones; a TLS one with a self-signed certificate is refused
// until listed (unverified TLS), then pulled with its login.
func TestPullPlainHTTPLoginAndTLS(t *testing.T) {
	c := dockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	repo := pullRepo(t, c)
	img := regtest.Image(t, "", []int{70_000})
	pull := func(host string, s PullSpec) (Pulled, error) {
		s.Node, s.Ref, s.Registry, s.ConfigFile = "n2", contract.MustImageRef(host+"/"+repo+":x"), host, "/etc/sparklane/sparklane.toml"
		return Pull(ctx, c, s, PullOptions{})
	}

	plain := regtest.Start(t, ctx, regtest.Options{IP: "127.0.0.2"})
	plain.Push(t, ctx, repo+":x", img)
	_, err := pull(plain.Host, PullSpec{})
	wantType(t, "plain HTTP, not listed", err, fault.InvalidSpec, "node n2: registry "+plain.Host+" answers plain HTTP: add it to image_insecure_registries in /etc/sparklane/sparklane.toml")
	if p, err := pull(plain.Host, PullSpec{Insecure: true}); err != nil || p.ID != configID(t, img) {
		t.Fatalf("plain HTTP, listed: %+v %v", p, err)
	}

	login := regtest.Start(t, ctx, regtest.Options{User: "sparky", Password: "right-pw"})
	login.Push(t, ctx, repo+":x", img)
	_, err = pull(login.Host, PullSpec{})
	wantType(t, "no login", err, fault.InvalidSpec, "refused pulling", "without credentials", "image_registry_auth_file")
	_, err = pull(login.Host, PullSpec{Auth: &Credentials{Username: "sparky", Password: "wrong"}, AuthFile: "/root/.docker/config.json"})
	wantType(t, "a wrong login", err, fault.InvalidSpec, "refused the credentials", "/root/.docker/config.json")
	if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error shows the password: %v", err)
	}
	if p, err := pull(login.Host, PullSpec{Auth: &Credentials{Username: "sparky", Password: "right-pw"}}); err != nil || p.ID != configID(t, img) {
		t.Fatalf("with the login: %+v %v", p, err)
	}

	tlsReg := regtest.Start(t, ctx, regtest.Options{IP: "127.0.0.3", TLS: true, User: "sparky", Password: "tls-pw"})
	tlsReg.Push(t, ctx, repo+":x", img)
	auth := &Credentials{Username: "sparky", Password: "tls-pw"}
	_, err = pull(tlsReg.Host, PullSpec{Auth: auth})
	wantType(t, "untrusted TLS", err, fault.InvalidSpec, "node n2: registry "+tlsReg.Host+" shows a certificate this node does not trust", "image_insecure_registries")
	if p, err := pull(tlsReg.Host, PullSpec{Auth: auth, Insecure: true}); err != nil || p.ID != configID(t, img) {
		t.Fatalf("TLS, listed: %+v %v", p, err)
	}
}
