package discover_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/cli"
	"github.com/sparklane/sparklane/internal/discover"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

func starter(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errw bytes.Buffer
	code := cli.Execute(context.Background(), args, strings.NewReader(""), &out, &errw, nil)
	return code, out.String(), errw.String()
}

// fakeSys is a test double of a node's /sys: one RDMA device mlx5_0 whose
// netdev is lo (so its IPv4 address, 127.0.0.1, is real on the test host).
func fakeSys(t *testing.T) string {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys", "class", "infiniband", "mlx5_0", "device", "net", "lo"), 0o755); err != nil {
		t.Fatal(err)
	}
	// and a DGX Spark's /proc/meminfo (128 GB unified memory).
	if err := os.MkdirAll(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "proc", "meminfo"), []byte("MemTotal:       125000000 kB\nMemFree: 1 kB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// starter init against two real loopback sshd hosts: discovery finds the
// disks (real df), the fake RDMA device and its netdev's address, Docker
// present on one and absent on the other; the file it writes passes
// `recipe check`; a re-run changes nothing and says so; a changed node
// shows a diff and changes nothing without --write, then --write applies it.
func TestInitDiscoversNodesOverSSHAndWritesACheckedConfig(t *testing.T) {
	// Two nodes on one loopback sshd (one identity authorizes both).
	a := sshdtest.Start(t)
	b := a
	sys := fakeSys(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "sparklane.toml")
	kh := filepath.Join(dir, "known_hosts")
	var khs []byte
	for _, s := range []*sshdtest.Server{a} {
		k, err := os.ReadFile(s.KnownHostsFile)
		if err != nil {
			t.Fatal(err)
		}
		khs = append(khs, k...)
	}
	if err := os.WriteFile(kh, khs, 0o600); err != nil {
		t.Fatal(err)
	}
	target := func(s *sshdtest.Server) string { return s.User + "@127.0.0.1:" + strconv.Itoa(s.Port) }
	// dgx2 without its user: written out as this user, with the port.
	args := []string{"init", "--node", "dgx1=" + target(a), "--node", "dgx2=127.0.0.1:" + strconv.Itoa(b.Port),
		"--known-hosts", kh, "--identity", a.IdentityFile, "--sys-root", sys, "--out", out}
	code, stdout, stderr := starter(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("init: exit %d\n%s%s", code, stdout, stderr)
	}
	var res struct {
		Written bool
		Nodes   []struct {
			Name, Root, Address string
			Docker              bool
			RDMA                []string
		}
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("init --json: %v\n%s", err, stdout)
	}
	if !res.Written || len(res.Nodes) != 2 {
		t.Fatalf("init: %+v", res)
	}
	for _, n := range res.Nodes {
		if n.Address != "127.0.0.1" || len(n.RDMA) != 1 || n.RDMA[0] != "mlx5_0" || n.Root == "" || !n.Docker {
			t.Errorf("node %+v: want address 127.0.0.1 from lo, RDMA mlx5_0, a root, docker", n)
		}
	}
	cfg, _ := os.ReadFile(out)
	t.Logf("init wrote:\n%s", cfg)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ssh = \"" + target(a) + "\"", "ssh = \"" + me.Username + "@127.0.0.1:" + strconv.Itoa(b.Port) + "\"", "hca = \"mlx5_0\"", "ifname = \"lo\"", "address = \"127.0.0.1\"", "gpu_memory = \"128GB\"", "# disk ", "name = \"all-2x\"", "known_hosts = \"" + kh + "\""} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "recipes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if code, o, e := starter(t, "recipe", "check", out); code != 0 {
		t.Fatalf("recipe check of the written config: exit %d\n%s%s\n%s", code, o, e, cfg)
	}

	// Re-run: nothing changes.
	code, stdout, stderr = starter(t, args...)
	if code != 0 || !strings.Contains(stdout, "is up to date") {
		t.Fatalf("re-run: exit %d\n%s%s", code, stdout, stderr)
	}
	// Docker gone from the nodes (a docker command that does not exist): diff, no write.
	changed := append(append([]string{}, args...), "--docker-command", "docker-absent-test-double")
	code, stdout, stderr = starter(t, changed...)
	if code != 0 || !strings.Contains(stdout, "+# Docker: NOT FOUND") || !strings.Contains(stdout, "-# Docker") || !strings.Contains(stdout, "nothing changed: re-run with --write") {
		t.Fatalf("changed node: exit %d\n%s%s", code, stdout, stderr)
	}
	if now, _ := os.ReadFile(out); !bytes.Equal(now, cfg) {
		t.Fatal("the config changed without --write")
	}
	code, stdout, stderr = starter(t, append(changed, "--write")...)
	if now, _ := os.ReadFile(out); code != 0 || !strings.Contains(string(now), "Docker: NOT FOUND") {
		t.Fatalf("--write: exit %d\n%s%s\n%s", code, stdout, stderr, now)
	}
}

// An unknown host key is refused, naming the node; nothing is written.
func TestInitRefusesUnknownHostKey(t *testing.T) {
	s := sshdtest.Start(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "sparklane.toml")
	code, stdout, stderr := starter(t, "init", "--node", "dgx1="+s.User+"@127.0.0.1:"+strconv.Itoa(s.Port), "--known-hosts", empty, "--identity", s.IdentityFile, "--out", out)
	if code == 0 || !strings.Contains(stderr, "node dgx1") {
		t.Fatalf("unknown host key: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("a config was written despite the refused host key")
	}
	t.Logf("refusal: %s", strings.TrimSpace(stderr))
}

// Parse reads every section; the root goes on the NVMe disk even when
// another disk has more room; the fast address is the RDMA netdev's.
func TestParseAndChoices(t *testing.T) {
	f := discover.Parse(`@@df
/dev/sda2 500000000000 1 400000000000 1% /
/dev/nvme0n1p1 4000000000000 1 3000000000000 1% /mnt/nvme
/dev/sdb1 8000000000000 1 7000000000000 1% /mnt/big
/dev/sda1 1000000000 1 900000000 1% /boot/efi
/dev/loop0 9000000000000 1 9000000000000 1% /mnt/image
@@dockerhost
unix:///run/user/1000/docker.sock
@@docker
present
{"nvidia":{"path":"nvidia-container-runtime"},"runc":{"path":"runc"}}
@@gpu
NVIDIA GB10, 122 GiB
@@ib
rocep1s0f1 enp1s0f1np1
roceP2p1s0f1 enP2p1s0f1np1
@@ip
lo 127.0.0.1/8
eno1 10.0.0.11/24
enp1s0f1np1 192.168.100.11/24
@@mem
MemTotal:       125000000 kB
@@end
`)
	if root, d, ok := f.Root(); !ok || root != "/mnt/nvme/sparklane" || d.Free != 3000000000000 {
		t.Errorf("root %q on %+v", root, d)
	}
	for _, d := range f.Disks {
		if d.Device == "/dev/loop0" {
			t.Errorf("a loop device listed as a disk: %+v", d)
		}
	}
	if addr, nd := f.FastAddress(); addr != "192.168.100.11" || nd != "enp1s0f1np1" {
		t.Errorf("fast address %s on %s", addr, nd)
	}
	if !f.Docker || !f.NvidiaRuntime || len(f.GPUs) != 1 || len(f.RDMA) != 2 || f.Memory != 128e9 {
		t.Errorf("facts %+v", f)
	}
	cfg := discover.Render([]discover.Host{{Name: "dgx1", SSH: "u@h", Facts: f}}, discover.Fleet{})
	if !strings.Contains(cfg, "gpu_memory = \"128GB\"") {
		t.Errorf("config lacks the node's memory:\n%s", cfg)
	}
	// A node whose login sets DOCKER_HOST (rootless Docker) is reached
	// at that daemon, not at the default socket.
	if !strings.Contains(cfg, "docker = \"unix:///run/user/1000/docker.sock\"") {
		t.Errorf("config lacks the node's DOCKER_HOST:\n%s", cfg)
	}
	f.DockerHost = ""
	if cfg := discover.Render([]discover.Host{{Name: "dgx1", SSH: "u@h", Facts: f}}, discover.Fleet{}); strings.Contains(cfg, "docker = ") {
		t.Errorf("a node without DOCKER_HOST gets a docker endpoint:\n%s", cfg)
	}
	if d := discover.Diff("a\nb\nc\n", "a\nB\nc\n"); d != "@@ line 2\n-b\n+B\n" {
		t.Errorf("diff %q", d)
	}
}
