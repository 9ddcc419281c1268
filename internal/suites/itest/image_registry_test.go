package itest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/registry"
	"golang.org/x/crypto/bcrypt"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/images"
)

// A lane whose image is on no node of the cluster but in the registry
// its recipe names (image_registry, a real CNCF distribution registry,
// Debian's docker-registry, with htpasswd auth, on 127.0.0.1): the dry
// run says where it would be pulled, the cutover pulls it once on the
// head through its Docker and the lane serves; the password is in no
// history. A pin the registry does not serve is refused naming node,
// expected and found. The cutover's history joins the corpus as
// cutover-registry.
func TestCutoverPullsAnImageFromTheRegistry(t *testing.T) {
	f, dc := demoFleet(t, 8<<20)
	ctx := withTimeout(t, 10*time.Minute)
	tag, suffix := imageTag(t, dc, "pulled")
	password := "pw-" + suffix + "-secret"
	reg := startRegistry(t, ctx, "sparky", password)
	remote := reg + "/" + tag
	t.Cleanup(func() { _, _ = dc.ImageRemove(context.Background(), remote, image.RemoveOptions{Force: true}) })

	// The image: engine-sim FROM scratch, built here, pushed, removed.
	dir := simContext(ctx, t, f, dc, "reg-"+suffix)
	if _, err := images.Build(ctx, dc, "test", remote, contract.Build{Context: dir}, f.cfg.SharedRoots, nil); err != nil {
		t.Fatal(err)
	}
	auth, _ := registry.EncodeAuthConfig(registry.AuthConfig{Username: "sparky", Password: password, ServerAddress: reg})
	rc, err := dc.ImagePush(ctx, remote, image.PushOptions{RegistryAuth: auth})
	if err != nil {
		t.Fatal(err)
	}
	pl, _ := io.ReadAll(rc)
	rc.Close()
	pushLog := string(pl)
	if strings.Contains(pushLog, `"error"`) || !strings.Contains(pushLog, "digest: sha256:") {
		t.Fatalf("push %s: %s", remote, pushLog)
	}
	for _, r := range []string{remote, tag} {
		_, _ = dc.ImageRemove(ctx, r, image.RemoveOptions{Force: true})
	}
	if _, err := dc.ImageInspect(ctx, tag); err == nil {
		t.Fatalf("%s still here after its removal", tag)
	}

	authFile := filepath.Join(t.TempDir(), "registry-auth")
	if err := os.WriteFile(authFile, []byte("sparky:"+password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lane := imageLane(t, f, "pulled-2x")
	write := func(img string) {
		lane(img, "\nimage_registry = \""+reg+"\"\nimage_registry_auth_file = \""+authFile+"\"", "")
	}
	write(tag)
	code, out, errOut := f.starter(ctx, "cutover", "--lane", "pulled-2x", "--dry-run")
	if want := "would be pulled from " + reg + " on n1"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("dry run: exit %d\n%s\n%s\nwant %q", code, out, errOut, want)
	}
	if code, out, errOut = f.starter(ctx, "cutover", "--lane", "pulled-2x"); code != 0 {
		t.Fatalf("cutover of a lane whose image is only in the registry: exit %d\n%s\n%s", code, out, errOut)
	}
	ins, err := dc.ImageInspect(ctx, tag)
	if err != nil || ins.Config == nil || len(ins.Config.Entrypoint) == 0 || ins.Config.Entrypoint[0] != "/engine-sim" {
		t.Fatalf("pulled image %s: %v", tag, err)
	}
	id := contract.CutoverID("demo-2x")
	if n := activitiesScheduled(t, f, id, "PullImage"); n != 1 {
		t.Errorf("cutover pulled %d times, want 1", n)
	}
	if h := historyText(t, f, id); strings.Contains(h, password) || !strings.Contains(h, authFile) {
		t.Errorf("the cutover's history carries the password, or not the auth file's path")
	}
	saveHistory(t, f, id, "cutover-registry")
	if code, out, errOut = f.starter(ctx, "stop", "--lane", "pulled-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}

	// A pin the registry does not serve: refused, naming node and digests.
	digest := ""
	for _, rd := range ins.RepoDigests {
		if r, d, ok := strings.Cut(rd, "@"); ok && r == reg+"/sparklane-test/pulled" {
			digest = d
		}
	}
	if digest == "" {
		t.Fatalf("pulled image has no digest of %s: %v", reg, ins.RepoDigests)
	}
	for _, r := range []string{tag, remote} {
		_, _ = dc.ImageRemove(ctx, r, image.RemoveOptions{Force: true})
	}
	wrong := "sha256:" + strings.Repeat("0", 64)
	write(tag + "@" + wrong)
	code, out, errOut = f.starter(ctx, "cutover", "--lane", "pulled-2x")
	if all := out + errOut; code == 0 || !strings.Contains(all, "node n1") || !strings.Contains(all, "pinned "+wrong) || !strings.Contains(all, "the registry serves "+digest) {
		t.Fatalf("a wrong pin: exit %d\n%s\n%s\nwant the refusal naming n1, %s and %s", code, out, errOut, wrong, digest)
	}
	if _, err := dc.ImageInspect(ctx, tag); err == nil {
		t.Errorf("a refused pull left %s tagged", tag)
	}

	// The right pin: pulled, its digest checked, served.
	write(tag + "@" + digest)
	if code, out, errOut = f.starter(ctx, "cutover", "--lane", "pulled-2x"); code != 0 {
		t.Fatalf("cutover of a lane pinned to the registry's digest: exit %d\n%s\n%s", code, out, errOut)
	}
	if again, err := dc.ImageInspect(ctx, tag); err != nil || again.ID != ins.ID {
		t.Errorf("pinned pull: %s is %v (%v), want %s", tag, again.ID, err, ins.ID)
	}
	if code, out, errOut = f.starter(ctx, "stop", "--lane", "pulled-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
}

// startRegistry runs Debian's docker-registry (CNCF distribution 2.8) on
// 127.0.0.1 and a free port, with htpasswd auth for user and password, a
// temp storage dir, until the test ends; it returns host:port once the
// registry answers.
func startRegistry(t *testing.T, ctx context.Context, user, password string) string {
	t.Helper()
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(user+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s/data\n  delete:\n    enabled: true\nhttp:\n  addr: %s\nauth:\n  htpasswd:\n    realm: sparklane-test\n    path: %s/htpasswd\n", dir, addr, dir)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/docker-registry", "serve", filepath.Join(dir, "config.yml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("docker-registry (apt-get install docker-registry): %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return addr
			}
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			t.Fatalf("registry on %s never answered: %v\n%s", addr, err, b)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
