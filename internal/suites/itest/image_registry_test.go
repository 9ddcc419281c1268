package itest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/images"
	"github.com/sparklane/sparklane/internal/syncbuf"
	"github.com/sparklane/sparklane/internal/testkit/regtest"
)

// simImage is engine-sim as an image FROM scratch, made from its static
// binary with go-containerregistry (no Docker build, no docker push): the
// binary at /engine-sim and /bin/sh, its entrypoint.
func simImage(ctx context.Context, t *testing.T, f *fleet, dc *dockerclient.Client, name string) v1.Image {
	t.Helper()
	bin, err := os.ReadFile(filepath.Join(simContext(ctx, t, f, dc, name), "engine-sim"))
	if err != nil {
		t.Fatal(err)
	}
	return regtest.ImageOf(t, "", []v1.Layer{regtest.LayerOf(t, map[string][]byte{"engine-sim": bin, "bin/sh": bin})}, "/engine-sim")
}

// daemonJSON is this machine's /etc/docker/daemon.json's hash ("" when
// there is none).
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
	return fmt.Sprintf("%x", s)
}

// dropImage removes ref's tag and its digest tag from this machine's
// Docker when the test ends.
func dropImage(t *testing.T, dc *dockerclient.Client, ref contract.ImageRef) {
	t.Cleanup(func() {
		for _, r := range []string{ref.Name, images.DigestTag(ref)} {
			_, _ = dc.ImageRemove(context.Background(), r, image.RemoveOptions{Force: true})
		}
	})
}

// A lane whose image is on no node of the cluster but in the registry its
// name carries (no image_registry: a real docker-registry with htpasswd
// auth on 127.0.0.1), the login only in a Docker config.json on the
// control host (the recipe's image_registry_auth_file): the dry run says
// where it would be pulled, the cutover hands n1 the login for its pull
// alone, pulls once through sparklane's registry client into n1's Docker
// and the lane serves. The password is in no history and no log line,
// no credentials file is left on a node, daemon.json is untouched. A pin
// the registry does not serve is refused naming node, expected and found;
// the right pin is pulled and served. The cutover's history joins the
// corpus as cutover-registry-login.
func TestCutoverPullsAnImageFromItsOwnRegistry(t *testing.T) {
	logs := &syncbuf.Buffer{}
	logger := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(logs), zapcore.DebugLevel))
	f, dc := demoFleet(t, 8<<20, func(o *fleetOptions) { o.log = logger })
	ctx := withTimeout(t, 10*time.Minute)
	before := daemonJSON(t)
	_, suffix := imageTag(t, dc, "pulled")
	password := "pw-" + suffix + "-secret"
	reg := regtest.Start(t, ctx, regtest.Options{User: "sparky", Password: password})
	img := simImage(ctx, t, f, dc, "reg-"+suffix)
	name := reg.Host + "/sparklane-test/pulled:" + suffix
	digest := reg.Push(t, ctx, "sparklane-test/pulled:"+suffix, img)
	id, _ := img.ConfigName()
	ref := contract.MustImageRef(name)
	dropImage(t, dc, ref)

	authFile := filepath.Join(t.TempDir(), "config.json")
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{reg.Host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("sparky:" + password))}}})
	if err := os.WriteFile(authFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	lane := imageLane(t, f, "pulled-2x")
	write := func(img string) { lane(img, "\nimage_registry_auth_file = \""+authFile+"\"", "") }
	write(name)
	code, out, errOut := f.starter(ctx, "cutover", "--lane", "pulled-2x", "--dry-run")
	if want := "would be pulled from " + reg.Host + " on n1"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("dry run: exit %d\n%s\n%s\nwant %q", code, out, errOut, want)
	}
	if code, out, errOut = f.starter(ctx, "cutover", "--lane", "pulled-2x"); code != 0 {
		t.Fatalf("cutover of a lane whose image is only in its registry: exit %d\n%s\n%s", code, out, errOut)
	}
	ins, err := dc.ImageInspect(ctx, name)
	if err != nil || ins.ID != id.String() || ins.Config == nil || len(ins.Config.Entrypoint) == 0 || ins.Config.Entrypoint[0] != "/engine-sim" {
		t.Fatalf("pulled image %s: %v (ID %s, want %s)", name, err, ins.ID, id)
	}
	cid := contract.CutoverID("demo-2x")
	for act, want := range map[string]int{"PullImage": 1, "SendRegistryAuth": 1, "DropRegistryAuth": 1} {
		if n := activitiesScheduled(t, f, cid, act); n != want {
			t.Errorf("cutover ran %s %d times, want %d", act, n, want)
		}
	}
	h := historyText(t, f, cid)
	if strings.Contains(h, password) || !strings.Contains(h, authFile) || !strings.Contains(h, images.CredentialDir) {
		t.Errorf("the cutover's history carries the password, or not the auth file's path and the node's credentials path")
	}
	if strings.Contains(logs.String(), password) || !strings.Contains(logs.String(), "registry login handed to the pulling node") {
		t.Errorf("the workers' logs carry the password, or do not say the login was handed over")
	}
	for _, n := range f.cfg.Nodes {
		if ents, _ := os.ReadDir(n.LocalPath(images.CredentialDir, nil)); len(ents) != 0 {
			t.Errorf("node %s keeps %d file(s) in %s after the pull", n.Name, len(ents), images.CredentialDir)
		}
	}
	saveHistory(t, f, cid, "cutover-registry-login")
	if code, out, errOut = f.starter(ctx, "stop", "--lane", "pulled-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}

	// A pin the registry does not serve: refused, naming node and digests.
	for _, r := range []string{name, images.DigestTag(ref)} {
		_, _ = dc.ImageRemove(ctx, r, image.RemoveOptions{Force: true})
	}
	wrong := "sha256:" + strings.Repeat("0", 64)
	write(name + "@" + wrong)
	code, out, errOut = f.starter(ctx, "cutover", "--lane", "pulled-2x")
	if all := out + errOut; code == 0 || !strings.Contains(all, "node n1") || !strings.Contains(all, "pinned "+wrong) || !strings.Contains(all, "the registry serves "+digest) {
		t.Fatalf("a wrong pin: exit %d\n%s\n%s\nwant the refusal naming n1, %s and %s", code, out, errOut, wrong, digest)
	}
	if _, err := dc.ImageInspect(ctx, name); err == nil {
		t.Errorf("a refused pull left %s tagged", name)
	}

	// The right pin: pulled, its digest checked, served from the ID.
	pinned := contract.MustImageRef(name + "@" + digest)
	dropImage(t, dc, pinned)
	write(pinned.String())
	if code, out, errOut = f.starter(ctx, "cutover", "--lane", "pulled-2x"); code != 0 {
		t.Fatalf("cutover of a lane pinned to the registry's digest: exit %d\n%s\n%s", code, out, errOut)
	}
	if again, err := dc.ImageInspect(ctx, images.DigestTag(pinned)); err != nil || again.ID != id.String() {
		t.Errorf("pinned pull: %s is %v (%v), want %s", images.DigestTag(pinned), again.ID, err, id)
	}
	if code, out, errOut = f.starter(ctx, "stop", "--lane", "pulled-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
	if after := daemonJSON(t); after != before {
		t.Errorf("/etc/docker/daemon.json changed during the test")
	}
}

// A plain-HTTP registry that is not on the node's loopback (127.0.0.2),
// named by its host in the recipe: refused with the key to set and the
// config file to set it in (nothing configured on Docker); listed in
// image_insecure_registries, pulled and served — daemon.json untouched.
func TestCutoverPullsFromAPlainHTTPRegistryOnceListed(t *testing.T) {
	ctx := withTimeout(t, 10*time.Minute)
	listed := regtest.Start(t, ctx, regtest.Options{IP: "127.0.0.2"})
	unlisted := regtest.Start(t, ctx, regtest.Options{IP: "127.0.0.2"})
	f, dc := demoFleet(t, 8<<20, func(o *fleetOptions) {
		o.extra += fmt.Sprintf("image_insecure_registries = [%q]\n", listed.Host)
	})
	before := daemonJSON(t)
	_, suffix := imageTag(t, dc, "plain")
	img := simImage(ctx, t, f, dc, "plain-"+suffix)
	for _, r := range []*regtest.Registry{listed, unlisted} {
		r.Push(t, ctx, "sparklane-test/plain:"+suffix, img)
	}
	lane := imageLane(t, f, "plain-2x")

	name := unlisted.Host + "/sparklane-test/plain:" + suffix
	dropImage(t, dc, contract.MustImageRef(name))
	lane(name, "", "")
	code, out, errOut := f.starter(ctx, "cutover", "--lane", "plain-2x")
	want := fmt.Sprintf("node n1: registry %s answers plain HTTP: add it to image_insecure_registries in %s", unlisted.Host, f.cfgFile)
	if code == 0 || !strings.Contains(out+errOut, want) {
		t.Fatalf("a plain-HTTP registry not listed: exit %d\n%s\n%s\nwant %q", code, out, errOut, want)
	}

	name = listed.Host + "/sparklane-test/plain:" + suffix
	dropImage(t, dc, contract.MustImageRef(name))
	lane(name, "", "")
	if code, out, errOut = f.starter(ctx, "cutover", "--lane", "plain-2x"); code != 0 {
		t.Fatalf("cutover from a listed plain-HTTP registry: exit %d\n%s\n%s", code, out, errOut)
	}
	id, _ := img.ConfigName()
	if ins, err := dc.ImageInspect(ctx, name); err != nil || ins.ID != id.String() {
		t.Fatalf("pulled image %s: %v", name, err)
	}
	if code, out, errOut = f.starter(ctx, "stop", "--lane", "plain-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
	if after := daemonJSON(t); after != before {
		t.Errorf("/etc/docker/daemon.json changed during the test")
	}
}
