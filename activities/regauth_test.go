package activities

import (
	"context"
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
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/images"
	"github.com/sparklane/sparklane/internal/testkit/regtest"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// A registry login goes from the control host's config.json to the one
// pull that needs it, as a 0600 file: written directly for a node on this
// machine (n1) and over real SSH for a remote one (n2, a real sshd on
// loopback); the pull (into this machine's real Docker, from a real
// docker-registry with htpasswd auth) reads and removes it; the drop
// after the pull removes a file no pull read. A registry the file has no
// login for gets no file (anonymous), a missing file is refused naming
// the control host.
func TestRegistryLoginReachesOnlyItsPull(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const password = "pw-only-in-the-auth-file"
	reg := regtest.Start(t, ctx, regtest.Options{User: "sparky", Password: password})
	repo := fmt.Sprintf("sparklane-acttest/login-%d", time.Now().UnixNano())
	img := regtest.Image(t, "", []int{40_000})
	digest := reg.Push(t, ctx, repo+":1", img)
	ref := contract.MustImageRef(reg.Host + "/" + repo + ":1@" + digest)

	authFile := filepath.Join(t.TempDir(), "config.json")
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{reg.Host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("sparky:" + password))}}})
	if err := os.WriteFile(authFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	sshd := sshdtest.Start(t)
	n1 := config.Node{Name: "n1", FSRoot: t.TempDir()}
	n2 := config.Node{Name: "n2", FSRoot: t.TempDir(), SSH: fmt.Sprintf("root@127.0.0.1:%d", sshd.Port), KnownHosts: sshd.KnownHostsFile, Identity: sshd.IdentityFile}
	ca := &ControlActivities{Config: &config.Config{File: "sparklane.toml", Nodes: []config.Node{n1, n2}}, Log: zap.NewNop()}

	sent, err := ca.SendRegistryAuth(ctx, contract.RegistryAuthInput{Node: "n1", Registry: reg.Host, AuthFile: authFile})
	if err != nil || images.CheckCredentialPath(sent.Path) != nil {
		t.Fatalf("send to n1: %+v %v", sent, err)
	}
	onN1 := n1.LocalPath(sent.Path, nil)
	if fi, err := os.Stat(onN1); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("n1's credentials file %s: %v %v", onN1, fi, err)
	}
	na := &NodeActivities{Node: n1, Log: zap.NewNop()}
	dc, err := na.dockerClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range []string{ref.Name, images.DigestTag(ref)} {
			_, _ = dc.(images.PullDocker).ImageRemove(context.Background(), r, image.RemoveOptions{})
		}
	})
	res, err := na.PullImage(ctx, contract.PullImageInput{Image: ref, Registry: ref.Registry(), Credentials: sent.Path, AuthFrom: authFile})
	if err != nil || res.Digest != digest || res.Layers != 1 {
		t.Fatalf("pull with the login: %+v %v", res, err)
	}
	if _, err := os.Stat(onN1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pull left its credentials file: %v", err)
	}
	if err := ca.DropRegistryAuth(ctx, contract.RegistryAuthDrop{Node: "n1", Path: sent.Path}); err != nil {
		t.Errorf("drop of a file the pull took: %v", err)
	}
	// The same file again: gone, and said so (the run sends it again).
	if _, err := na.PullImage(ctx, contract.PullImageInput{Image: ref, Registry: ref.Registry(), Credentials: sent.Path}); err == nil || !strings.Contains(err.Error(), "sends them again") {
		t.Errorf("a pull whose credentials are gone: %v", err)
	}

	// Over SSH: the file lands on n2 (its fs_root here), 0600; the drop
	// removes it.
	sent2, err := ca.SendRegistryAuth(ctx, contract.RegistryAuthInput{Node: "n2", Registry: reg.Host + "/team", AuthFile: authFile})
	if err != nil {
		t.Fatalf("send to n2 over SSH: %v\n%s", err, sshd.Log())
	}
	onN2 := n2.LocalPath(sent2.Path, nil)
	fi, err := os.Stat(onN2)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("n2's credentials file %s: %v %v", onN2, fi, err)
	}
	if d, _ := os.Stat(filepath.Dir(onN2)); d.Mode().Perm() != 0o700 {
		t.Errorf("n2's credentials dir mode %v", d.Mode())
	}
	if c, err := images.TakeCredentials(filepath.Dir(onN2), filepath.Base(onN2), reg.Host); err != nil || c.Password != password {
		t.Errorf("n2's file: %v %v", c, err)
	}
	sent3, _ := ca.SendRegistryAuth(ctx, contract.RegistryAuthInput{Node: "n2", Registry: reg.Host, AuthFile: authFile})
	if err := ca.DropRegistryAuth(ctx, contract.RegistryAuthDrop{Node: "n2", Path: sent3.Path}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n2.LocalPath(sent3.Path, nil)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the drop left n2's file: %v", err)
	}
	if err := ca.DropRegistryAuth(ctx, contract.RegistryAuthDrop{Node: "n2", Path: "/etc/passwd"}); err == nil {
		t.Errorf("a drop of a path that is no credentials file was accepted")
	}

	if none, err := ca.SendRegistryAuth(ctx, contract.RegistryAuthInput{Node: "n1", Registry: "other.lan:5000", AuthFile: authFile}); err != nil || none.Path != "" {
		t.Errorf("a registry without a login: %+v %v, want no file", none, err)
	}
	if _, err := ca.SendRegistryAuth(ctx, contract.RegistryAuthInput{Node: "n1", Registry: reg.Host, AuthFile: "/nonexistent/config.json"}); err == nil || !strings.Contains(err.Error(), "is not on the control host") {
		t.Errorf("a missing auth file: %v", err)
	}
}
