package regtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/crypto/bcrypt"
)

// Binary is Debian's registry (apt-get install docker-registry).
const Binary = "/usr/bin/docker-registry"

// Options say how the registry listens.
type Options struct {
	// IP is the loopback address it binds (default 127.0.0.1).
	IP string
	// User and Password, when User is set, require a login (htpasswd).
	User, Password string
	// TLS serves HTTPS with a self-signed certificate for IP.
	TLS bool
}

// Registry is one running registry, stopped when the test ends.
type Registry struct {
	// Host is IP:PORT, as an image names it.
	Host string
	// CertPEM is its certificate (TLS only).
	CertPEM []byte
	// Dir holds its config, storage and log (registry.log).
	Dir  string
	opts Options
}

// Start runs a registry with o until the test ends and returns once it
// answers /v2/.
func Start(t testing.TB, ctx context.Context, o Options) *Registry {
	t.Helper()
	if o.IP == "" {
		o.IP = "127.0.0.1"
	}
	r := &Registry{Dir: t.TempDir(), opts: o}
	l, err := net.Listen("tcp", net.JoinHostPort(o.IP, "0"))
	if err != nil {
		t.Fatalf("regtest: a free port on %s: %v", o.IP, err)
	}
	r.Host = l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s/data\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n", r.Dir, r.Host)
	if o.TLS {
		r.CertPEM = r.writeCert(t, o.IP)
		cfg += fmt.Sprintf("  tls:\n    certificate: %s/cert.pem\n    key: %s/key.pem\n", r.Dir, r.Dir)
	}
	if o.User != "" {
		hash, err := bcrypt.GenerateFromPassword([]byte(o.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		r.write(t, "htpasswd", []byte(o.User+":"+string(hash)+"\n"))
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: regtest\n    path: %s/htpasswd\n", r.Dir)
	}
	r.write(t, "config.yml", []byte(cfg))
	logf, err := os.Create(filepath.Join(r.Dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Binary, "serve", filepath.Join(r.Dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("regtest: %s (apt-get install docker-registry): %v", Binary, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	r.waitReady(t, ctx)
	return r
}

func (r *Registry) write(t testing.TB, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(r.Dir, name), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeCert writes a self-signed certificate and key for ip.
func (r *Registry) writeCert(t testing.TB, ip string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "regtest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP(ip)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	r.write(t, "cert.pem", cert)
	r.write(t, "key.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	return cert
}

// scheme is how the registry is spoken to.
func (r *Registry) scheme() string {
	if r.opts.TLS {
		return "https"
	}
	return "http"
}

// transport trusts the registry's own certificate.
func (r *Registry) transport() http.RoundTripper {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if r.opts.TLS {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(r.CertPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	return tr
}

func (r *Registry) waitReady(t testing.TB, ctx context.Context) {
	t.Helper()
	c := &http.Client{Transport: r.transport(), Timeout: 2 * time.Second}
	for {
		resp, err := c.Get(r.scheme() + "://" + r.Host + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return
			}
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(filepath.Join(r.Dir, "registry.log"))
			t.Fatalf("regtest: registry on %s never answered: %v\n%s", r.Host, err, b)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// remoteOpts are the options a push with the registry's login uses.
func (r *Registry) remoteOpts(ctx context.Context) []remote.Option {
	auth := authn.Anonymous
	if r.opts.User != "" {
		auth = authn.FromConfig(authn.AuthConfig{Username: r.opts.User, Password: r.opts.Password})
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(r.transport())}
}

func (r *Registry) ref(t testing.TB, repoTag string) name.Reference {
	t.Helper()
	var o []name.Option
	if !r.opts.TLS {
		o = append(o, name.Insecure)
	}
	ref, err := name.ParseReference(r.Host+"/"+repoTag, o...)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// Push pushes img as HOST/repoTag and returns the manifest's digest.
func (r *Registry) Push(t testing.TB, ctx context.Context, repoTag string, img v1.Image) string {
	t.Helper()
	if err := remote.Write(r.ref(t, repoTag), img, r.remoteOpts(ctx)...); err != nil {
		t.Fatalf("regtest: push %s: %v", repoTag, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// PushIndex pushes an index of imgs (one per platform) as HOST/repoTag
// and returns its digest.
func (r *Registry) PushIndex(t testing.TB, ctx context.Context, repoTag string, imgs map[string]v1.Image) string {
	t.Helper()
	var idx v1.ImageIndex = empty.Index
	for plat, img := range imgs {
		p, err := v1.ParsePlatform(plat)
		if err != nil {
			t.Fatal(err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
	}
	if err := remote.WriteIndex(r.ref(t, repoTag), idx, r.remoteOpts(ctx)...); err != nil {
		t.Fatalf("regtest: push index %s: %v", repoTag, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// Image is an image FROM scratch for platform (os/arch; "" the machine's
// linux/GOARCH) with one layer per size, each a file of random bytes, and
// the entrypoint given (none: no config.Entrypoint).
func Image(t testing.TB, platform string, sizes []int, entrypoint ...string) v1.Image {
	t.Helper()
	var layers []v1.Layer
	for i, n := range sizes {
		layers = append(layers, Layer(t, fmt.Sprintf("f%d", i), randomBytes(n)))
	}
	return ImageOf(t, platform, layers, entrypoint...)
}

// ImageOf is an image FROM scratch of layers for platform ("" the
// machine's).
func ImageOf(t testing.TB, platform string, layers []v1.Layer, entrypoint ...string) v1.Image {
	t.Helper()
	if platform == "" {
		platform = "linux/" + runtime.GOARCH
	}
	p, err := v1.ParsePlatform(platform)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Config.Entrypoint = entrypoint
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// Layer is a gzip layer holding one file at path (mode 0755).
func Layer(t testing.TB, path string, content []byte) v1.Layer {
	t.Helper()
	return LayerOf(t, map[string][]byte{path: content})
}

// LayerOf is a gzip layer holding files (path → content, mode 0755), in
// path order.
func LayerOf(t testing.TB, files map[string][]byte) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, path := range slices.Sorted(maps.Keys(files)) {
		content := files[path]
		if err := tw.WriteHeader(&tar.Header{Name: path, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
