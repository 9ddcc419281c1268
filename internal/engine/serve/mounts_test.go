package serve_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/fault"
)

// mountTree is a node root, a shared root (the NAS) and a host directory
// outside both, with links from inside the root to each.
type mountTree struct {
	root, nas, host string
}

func newMountTree(t *testing.T) mountTree {
	t.Helper()
	base := t.TempDir()
	m := mountTree{root: filepath.Join(base, "node", "srv", "sparklane"), nas: filepath.Join(base, "nas"), host: filepath.Join(base, "etc")}
	writeFiles(t, m.root, map[string]string{"lane/hub/model": "w", "cache/triton/k": "k"})
	writeFiles(t, m.nas, map[string]string{"hub/blob": "b"})
	writeFiles(t, m.host, map[string]string{"passwd": "root:x:0:0"})
	for link, target := range map[string]string{
		"ok":       m.host,                             // out of the root
		"alias":    "lane/hub",                         // stays inside
		"nasl":     filepath.Join(m.nas, "hub"),        // into the shared root
		"dangling": filepath.Join(m.host, "not-there"), // would be created outside
	} {
		if err := os.Symlink(target, filepath.Join(m.root, link)); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func TestCheckMountSources(t *testing.T) {
	m := newMountTree(t)
	roots, shared := []string{m.root}, []string{m.nas}
	for _, c := range []struct {
		name    string
		mount   contract.Mount
		wantSrc string // "" = refused
		says    string
	}{
		{"inside", contract.Mount{Src: m.root + "/lane/hub", Dst: "/hub", ReadOnly: true}, m.root + "/lane/hub", ""},
		{"the root itself", contract.Mount{Src: m.root, Dst: "/srv"}, m.root, ""},
		{"not yet created", contract.Mount{Src: m.root + "/cache/new/dir", Dst: "/c"}, m.root + "/cache/new/dir", ""},
		{"link staying inside", contract.Mount{Src: m.root + "/alias", Dst: "/hub", ReadOnly: true}, m.root + "/lane/hub", ""},
		{"shared read-only", contract.Mount{Src: m.nas + "/hub/blob", Dst: "/b", ReadOnly: true}, m.nas + "/hub/blob", ""},
		{"host path marked host", contract.Mount{Src: m.host, Dst: "/etc2", ReadOnly: true, Host: true}, m.host, ""},
		{"link out of the root", contract.Mount{Src: m.root + "/ok", Dst: "/cfg", ReadOnly: true}, "", "resolves through a symlink to " + m.host},
		{"beneath a link out", contract.Mount{Src: m.root + "/ok/passwd", Dst: "/p", ReadOnly: true}, "", "resolves through a symlink to " + m.host + "/passwd"},
		{"link into the shared root", contract.Mount{Src: m.root + "/nasl", Dst: "/n", ReadOnly: true}, m.nas + "/hub", ""},
		{"link into the shared root, read-write", contract.Mount{Src: m.root + "/nasl", Dst: "/n"}, "", "set read_only = true"},
		{"dangling link", contract.Mount{Src: m.root + "/dangling/x", Dst: "/d"}, "", m.root + "/dangling is a dangling symlink"},
		{"shared read-write", contract.Mount{Src: m.nas + "/hub", Dst: "/hub"}, "", "set read_only = true"},
		{"outside", contract.Mount{Src: m.host, Dst: "/etc2", ReadOnly: true}, "", "outside the node's roots and shared roots"},
		{"dot-dot out", contract.Mount{Src: m.root + "/../../../etc", Dst: "/etc2", ReadOnly: true}, "", "outside the node's roots"},
		{"relative", contract.Mount{Src: "lane/hub", Dst: "/hub"}, "", "not an absolute path"},
	} {
		got, err := serve.CheckMountSources("n7", []contract.Mount{c.mount}, roots, shared)
		if c.wantSrc != "" {
			if err != nil || len(got) != 1 || got[0].Src != c.wantSrc || got[0].Dst != c.mount.Dst || got[0].ReadOnly != c.mount.ReadOnly {
				t.Errorf("%s: got %+v, %v; want source %s", c.name, got, err, c.wantSrc)
			}
			continue
		}
		if typ, _ := fault.TypeOf(err); typ != serve.MountRefused {
			t.Errorf("%s: %v, want a permanent %s", c.name, err, serve.MountRefused)
			continue
		}
		for _, s := range []string{"node n7", "mount " + c.mount.Src + " -> " + c.mount.Dst, c.says, "roots [" + m.root + "]", "host = true"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error does not say %q: %v", c.name, s, err)
			}
		}
	}
	// No roots at all: nothing but host mounts.
	if _, err := serve.CheckMountSources("n7", []contract.Mount{{Src: m.root, Dst: "/srv"}}, nil, nil); err == nil {
		t.Errorf("a node without roots may bind %s", m.root)
	}
}

func TestStartRankRefusesMountOutsideRoots(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx := context.Background()
	m := newMountTree(t)

	bad := spec(lane, "serve-n7", 0, "h", img, "write:/cfg/planted", "exit:0")
	bad.Roots, bad.SharedRoots = []string{m.root}, []string{m.nas}
	bad.Mounts = []contract.Mount{
		{Src: m.root + "/lane/hub", Dst: "/hub", ReadOnly: true},
		{Src: m.root + "/ok", Dst: "/cfg"}, // /srv/sparklane/ok -> /etc
	}
	_, err := serve.StartRank(ctx, d, bad)
	if typ, _ := fault.TypeOf(err); typ != serve.MountRefused || !strings.Contains(err.Error(), m.root+"/ok -> /cfg") || !strings.Contains(err.Error(), "serve-n7") {
		t.Fatalf("StartRank with a mount out of the root: %v, want %s naming the mount and node", err, serve.MountRefused)
	}
	if _, err := d.ContainerInspect(ctx, serve.ContainerName(lane, 0)); !cerrdefs.IsNotFound(err) {
		t.Errorf("a container exists after the refused mount: %v", err)
	}
	if cs := listLane(t, d, lane); len(cs) != 0 {
		t.Errorf("%d containers created for a refused mount", len(cs))
	}
	if got := readTree(t, m.host); len(got) != 1 || got["passwd"] != "root:x:0:0" {
		t.Errorf("host directory changed: %v", got)
	}

	// The same host directory, declared a host path, is bound.
	ok := spec(lane, "serve-n7", 1, "h", img, "write:/cfg/probe", "exit:0")
	ok.Roots, ok.SharedRoots = []string{m.root}, []string{m.nas}
	ok.Mounts = []contract.Mount{
		{Src: m.root + "/alias", Dst: "/hub", ReadOnly: true},
		{Src: m.host, Dst: "/cfg", Host: true},
	}
	r, err := serve.StartRank(ctx, d, ok)
	if err != nil || !r.Created {
		t.Fatalf("StartRank with a host = true mount: %+v, %v", r, err)
	}
	waitRankExited(t, d, r.ID)
	if b, err := os.ReadFile(filepath.Join(m.host, "probe")); err != nil {
		t.Errorf("host mount not bound: %v (%q)", err, b)
	}
	ins, err := d.ContainerInspect(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	srcs := map[string]string{}
	for _, mt := range ins.Mounts {
		srcs[mt.Destination] = mt.Source
	}
	// The checked, resolved source is what Docker binds.
	if srcs["/hub"] != m.root+"/lane/hub" || srcs["/cfg"] != m.host {
		t.Errorf("container mounts = %v, want /hub from %s and /cfg from %s", srcs, m.root+"/lane/hub", m.host)
	}
}
