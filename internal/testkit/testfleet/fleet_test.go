package testfleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/node"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// leftovers lists what of fleet st still exists on the machine: network
// namespaces, interfaces, mounts, live processes, the iptables rule and the
// fleet directory. Empty means Close removed everything.
func leftovers(t *testing.T, name, dir string, pids []int) []string {
	t.Helper()
	var left []string
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "sl-"+name+"-") {
			left = append(left, "netns "+l)
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Name == "slb-"+name || strings.HasPrefix(i.Name, "slv-"+name+"-") || strings.HasPrefix(i.Name, "slp-"+name+"-") {
			left = append(left, "interface "+i.Name)
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, dir) || strings.Contains(l, "/run/netns/sl-"+name+"-") {
			left = append(left, "mount "+l)
		}
	}
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err == nil && !strings.Contains(string(b), ") Z ") {
			left = append(left, fmt.Sprintf("process %d %s", p, b))
		}
	}
	if exec.Command("iptables", append([]string{"-C"}, iptablesRule("slb-"+name)...)...).Run() == nil {
		left = append(left, "iptables rule for slb-"+name)
	}
	if _, err := os.Stat(dir); err == nil {
		left = append(left, "directory "+dir)
	}
	return left
}

func fleetPIDs(f *Fleet) []int {
	var pids []int
	for _, n := range f.Nodes() {
		pids = append(pids, n.HolderPID)
		pids = append(pids, nodePIDs(n)...)
	}
	return pids
}

func TestThreeNodeFleet(t *testing.T) {
	start := time.Now()
	f := New(t, Options{Name: "tfthree", Nodes: 3})
	t.Logf("MEASURE up 3 nodes without dockerd: %s", time.Since(start).Round(time.Millisecond))

	t.Run("each node has its own address and sshd", func(t *testing.T) { checkOwnAddressAndSSHD(t, f) })
	t.Run("node A reaches node B's sshd by IP with the host key checked", func(t *testing.T) { checkNodeReachesNodeByIP(t, f) })
	t.Run("host keys verify from the control host", func(t *testing.T) { checkHostKeysFromControl(t, f) })
	t.Run("node-local /mnt/nvme is the node's own", func(t *testing.T) { checkNodeLocalNVMe(t, f) })
	t.Run("the NAS is shared and read-only on nodes", func(t *testing.T) { checkSharedReadOnlyNAS(t, f) })
	t.Run("link down makes a node unreachable and link up restores it", func(t *testing.T) { checkLinkDownAndUp(t, f) })
	t.Run("killing a node's processes stops its sshd until restarted", func(t *testing.T) { checkKilledProcessesStopSSHD(t, f) })
	t.Run("close leaves nothing behind", func(t *testing.T) { checkCloseLeavesNothing(t, f) })
}

// checkOwnAddressAndSSHD is TestThreeNodeFleet's subtest "each node has its own address and sshd".
func checkOwnAddressAndSSHD(t *testing.T, f *Fleet) {
	for _, n := range f.Nodes() {
		out, err := f.SSH(n, "ip -4 -o addr show eth0; hostname")
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if !strings.Contains(string(out), n.IP+"/24") {
			t.Errorf("node %s over ssh reports %q, want its address %s", n.Name, out, n.IP)
		}
		if !strings.HasSuffix(string(out), "\n"+n.Hostname+"\n") {
			t.Errorf("node %s's hostname over ssh: %q, want %s", n.Name, out, n.Hostname)
		}
		if n.SSHAddr() != "root@"+n.IP+":22" {
			t.Errorf("SSHAddr %q", n.SSHAddr())
		}
	}
}

// checkNodeReachesNodeByIP is TestThreeNodeFleet's subtest "node A reaches node B's sshd by IP with the host key checked".
func checkNodeReachesNodeByIP(t *testing.T, f *Fleet) {
	a := f.Node(1)
	b := f.Node(2)
	c := f.Node(3)
	sshArgs := []string{"ssh", "-i", f.IdentityFile(), "-o", "UserKnownHostsFile=" + f.KnownHostsFile(),
		"-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"}
	out, err := f.Exec(a, append(sshArgs, "root@"+b.IP, "ip -4 -o addr show eth0")...)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), b.IP+"/24") {
		t.Fatalf("ssh from %s to %s ran where? %q", a.Name, b.IP, out)
	}
	// The same client with a known_hosts that lists C's key for B refuses.
	bad := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(bad, []byte(b.IP+" "+c.HostKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sshArgs[4] = "UserKnownHostsFile=" + bad
	out, err = f.Exec(a, append(sshArgs, "root@"+b.IP, "true")...)
	if err == nil || !strings.Contains(string(out), "HOST IDENTIFICATION HAS CHANGED") {
		t.Fatalf("ssh with a wrong host key for %s: err=%v out=%s; want a host key mismatch", b.IP, err, out)
	}
}

// checkHostKeysFromControl is TestThreeNodeFleet's subtest "host keys verify from the control host".
func checkHostKeysFromControl(t *testing.T, f *Fleet) {
	a := f.Node(1)
	b := f.Node(2)
	kh, err := os.ReadFile(f.KnownHostsFile())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range f.Nodes() {
		if !strings.Contains(string(kh), n.IP+" "+n.HostKey+"\n") {
			t.Errorf("known_hosts lacks %q", n.IP+" "+n.HostKey)
		}
	}
	// A known_hosts with B's line carrying A's key: the handshake fails
	// with a key mismatch naming B's address.
	bad := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(bad, []byte(b.IP+" "+a.HostKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(bad)
	if err != nil {
		t.Fatal(err)
	}
	signer := loadSigner(t, f.IdentityFile())
	_, err = ssh.Dial("tcp", net.JoinHostPort(b.IP, "22"), &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: cb,
		HostKeyAlgorithms: []string{ssh.KeyAlgoED25519}, Timeout: 5 * time.Second,
	})
	var ke *knownhosts.KeyError
	if !errors.As(err, &ke) || len(ke.Want) != 1 {
		t.Fatalf("dial %s with a wrong known_hosts: %v; want a knownhosts.KeyError", b.IP, err)
	}
	// And the project's own dialer reaches a node from its config form
	// (`ssh = "root@IP:22"`, known_hosts, identity).
	tg, err := node.ParseSSH(b.SSHAddr())
	if err != nil {
		t.Fatal(err)
	}
	tg.KnownHosts, tg.Identity = f.KnownHostsFile(), f.IdentityFile()
	if tg != f.Target(b) {
		t.Errorf("Target = %+v, parsed config form = %+v", f.Target(b), tg)
	}
	ctx := context.Background()
	cl, err := node.Dial(ctx, tg, 5*time.Second)
	if err != nil {
		t.Fatalf("node.Dial %s: %v", tg, err)
	}
	defer cl.Close()
	stdout, stderr, code, err := node.Run(ctx, cl, "hostname")
	if err != nil || code != 0 || stdout != b.Hostname+"\n" {
		t.Fatalf("node.Run hostname on %s: %q %q %d %v", b.Name, stdout, stderr, code, err)
	}
}

// checkNodeLocalNVMe is TestThreeNodeFleet's subtest "node-local /mnt/nvme is the node's own".
func checkNodeLocalNVMe(t *testing.T, f *Fleet) {
	a := f.Node(1)
	b := f.Node(2)
	c := f.Node(3)
	if out, err := f.SSH(a, "echo only-on-h1 > /mnt/nvme/marker && cat /mnt/nvme/marker"); err != nil || string(out) != "only-on-h1\n" {
		t.Fatalf("write on %s: %v %q", a.Name, err, out)
	}
	for _, n := range []*Node{b, c} {
		out, err := f.SSH(n, "test ! -e /mnt/nvme/marker && echo absent")
		if err != nil || string(out) != "absent\n" {
			t.Errorf("node %s sees node %s's /mnt/nvme/marker: %v %q", n.Name, a.Name, err, out)
		}
	}
	if _, err := os.Stat("/mnt/nvme/marker"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("control host's /mnt/nvme/marker: %v; want not exist", err)
	}
	hp, err := f.HostPath(a, "/mnt/nvme/marker")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(hp); err != nil || string(got) != "only-on-h1\n" {
		t.Errorf("host path %s: %v %q", hp, err, got)
	}
	if _, err := f.HostPath(a, "/opt/x"); err == nil || !strings.Contains(err.Error(), "/opt/x") {
		t.Errorf("HostPath of a shared path: %v", err)
	}
}

// checkSharedReadOnlyNAS is TestThreeNodeFleet's subtest "the NAS is shared and read-only on nodes".
func checkSharedReadOnlyNAS(t *testing.T, f *Fleet) {
	if err := os.WriteFile(filepath.Join(f.NASDir(), "model.txt"), []byte("weights\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range f.Nodes() {
		out, err := f.SSH(n, "cat "+NASPath+"/model.txt")
		if err != nil || string(out) != "weights\n" {
			t.Errorf("node %s reads the NAS: %v %q", n.Name, err, out)
		}
		out, err = f.Exec(n, "sh", "-c", "echo x > "+NASPath+"/new")
		if err == nil || !strings.Contains(string(out), "Read-only file system") {
			t.Errorf("node %s writes the NAS: err=%v out=%q; want EROFS", n.Name, err, out)
		}
	}
	if _, err := os.Stat(filepath.Join(f.NASDir(), "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("NAS got a file from a node: %v", err)
	}
}

// checkLinkDownAndUp is TestThreeNodeFleet's subtest "link down makes a node unreachable and link up restores it".
func checkLinkDownAndUp(t *testing.T, f *Fleet) {
	a := f.Node(1)
	b := f.Node(2)
	c := f.Node(3)
	if err := f.LinkDown(b); err != nil {
		t.Fatal(err)
	}
	// The node sees its cable pulled: no carrier on its eth0.
	if out, err := f.Exec(b, "ip", "-o", "link", "show", "eth0"); err != nil || !strings.Contains(string(out), "NO-CARRIER") {
		t.Fatalf("node %s's eth0 with the link down: %v %q; want NO-CARRIER", b.Name, err, out)
	}
	if c, err := f.SSHClient(b, time.Second); err == nil {
		c.Close()
		t.Fatalf("node %s answered SSH with its link down", b.Name)
	}
	if out, err := f.Exec(a, "ssh", "-i", f.IdentityFile(), "-o", "UserKnownHostsFile="+f.KnownHostsFile(),
		"-o", "BatchMode=yes", "-o", "ConnectTimeout=1", "root@"+b.IP, "true"); err == nil {
		t.Fatalf("node %s reached %s with its link down: %s", a.Name, b.Name, out)
	}
	if out, err := f.SSH(c, "true"); err != nil {
		t.Fatalf("node %s lost too: %v %s", c.Name, err, out)
	}
	if err := f.LinkUp(b); err != nil {
		t.Fatal(err)
	}
	err := poll(context.Background(), 20*time.Second, "ssh after link up", func() (bool, error) {
		_, err := f.SSH(b, "true")
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkKilledProcessesStopSSHD is TestThreeNodeFleet's subtest "killing a node's processes stops its sshd until restarted".
func checkKilledProcessesStopSSHD(t *testing.T, f *Fleet) {
	c := f.Node(3)
	if err := f.KillNode(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if len(f.NodePIDs(c)) != 0 {
		t.Fatalf("node %s still runs %v", c.Name, f.NodePIDs(c))
	}
	if _, err := f.SSH(c, "true"); err == nil {
		t.Fatalf("node %s answered SSH after KillNode", c.Name)
	}
	if err := f.StartSSHD(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if out, err := f.SSH(c, "cat /mnt/nvme/marker 2>/dev/null; echo ok"); err != nil || string(out) != "ok\n" {
		t.Fatalf("after restart: %v %q", err, out)
	}
}

// checkCloseLeavesNothing is TestThreeNodeFleet's subtest "close leaves nothing behind".
func checkCloseLeavesNothing(t *testing.T, f *Fleet) {
	pids := fleetPIDs(f)
	if len(pids) < 6 {
		t.Fatalf("expected holders and sshds, got pids %v", pids)
	}
	if left := leftovers(t, f.Name(), f.Dir(), nil); len(left) == 0 {
		t.Fatal("leftovers found nothing while the fleet is up: the check is blind")
	}
	start := time.Now()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("MEASURE close 3 nodes without dockerd: %s", time.Since(start).Round(time.Millisecond))
	if left := leftovers(t, f.Name(), f.Dir(), pids); len(left) > 0 {
		t.Fatalf("after Close:\n%s", strings.Join(left, "\n"))
	}
}

func loadSigner(t *testing.T, path string) ssh.Signer {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// buildHelloImage builds the FROM scratch test image on the machine's
// Docker (no registry needed) and returns its tag.
func buildHelloImage(t *testing.T) string {
	t.Helper()
	ctxDir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(ctxDir, "hello"), "./testdata/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build hello: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte("FROM scratch\nCOPY hello /hello\nENTRYPOINT [\"/hello\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const tag = "sparklane-testfleet/hello:test"
	if out, err := exec.Command("docker", "build", "-q", "-t", tag, ctxDir).CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v: %s", err, out)
	}
	return tag
}

func TestDockerOnNodes(t *testing.T) {
	img := buildHelloImage(t)
	start := time.Now()
	f := New(t, Options{Name: "tfdock", Nodes: 2, Docker: true})
	t.Logf("MEASURE up 2 nodes with dockerd: %s", time.Since(start).Round(time.Millisecond))
	a, b := f.Node(1), f.Node(2)

	// save | load into node A's dockerd through its socket on the host.
	save := exec.Command("docker", "save", img)
	load := exec.Command("docker", "-H", "unix://"+a.DockerSocket, "load")
	pipe, err := save.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	load.Stdin = pipe
	if err := save.Start(); err != nil {
		t.Fatal(err)
	}
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("docker load into %s: %v: %s", a.Name, err, out)
	}
	if err := save.Wait(); err != nil {
		t.Fatal(err)
	}
	// Node B's dockerd is its own: it does not have the image.
	if out, err := exec.Command("docker", "-H", "unix://"+b.DockerSocket, "image", "inspect", img).CombinedOutput(); err == nil {
		t.Fatalf("node %s's dockerd has an image loaded only into %s: %s", b.Name, a.Name, out)
	}
	addr := net.JoinHostPort(a.IP, "18080")
	if out, err := exec.Command("docker", "-H", "unix://"+a.DockerSocket, "run", "-d", "--name", "hello",
		"--network", "host", img, "-addr", addr).CombinedOutput(); err != nil {
		t.Fatalf("docker run on %s: %v: %s", a.Name, err, out)
	}
	// Over SSH the node sees its dockerd at the node path.
	if out, err := f.SSH(a, "test -S "+NodeDockerSocket+" && echo sock"); err != nil || string(out) != "sock\n" {
		t.Fatalf("node %s: %s over ssh: %v %q", a.Name, NodeDockerSocket, err, out)
	}
	var body string
	err = poll(context.Background(), 30*time.Second, "hello on "+addr, func() (bool, error) {
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err == nil && resp.StatusCode == 200, err
	})
	if err != nil {
		logs, _ := exec.Command("docker", "-H", "unix://"+a.DockerSocket, "logs", "hello").CombinedOutput()
		t.Fatalf("%v; container logs: %s", err, logs)
	}
	if body != "hello from "+addr+"\n" {
		t.Fatalf("GET %s = %q", addr, body)
	}
	// The container listens on node A's address only.
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(b.IP, "18080"), 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("node %s answers on 18080 too", b.Name)
	}
	// A power cut on B: its dockerd dies with everything else; a fresh
	// dockerd starts on the same data-root (dockerd's own start time).
	if err := f.KillNode(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if resp, err := DockerHTTP(b).Get("http://docker/_ping"); err == nil {
		resp.Body.Close()
		t.Fatalf("node %s's dockerd answers after KillNode", b.Name)
	}
	start = time.Now()
	if err := f.StartDocker(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	t.Logf("MEASURE dockerd start on a node: %s", time.Since(start).Round(time.Millisecond))
	if err := f.StartSSHD(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	containerPIDs := cgroupProcs(a)
	if len(containerPIDs) == 0 {
		t.Fatalf("no process in node %s's container cgroup %s", a.Name, a.CgroupParent)
	}

	pids := append(fleetPIDs(f), containerPIDs...)
	start = time.Now()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("MEASURE close 2 nodes with dockerd and a container: %s", time.Since(start).Round(time.Millisecond))
	if left := leftovers(t, f.Name(), f.Dir(), pids); len(left) > 0 {
		t.Fatalf("after Close:\n%s", strings.Join(left, "\n"))
	}
	if dirs := cgroupDirs(a); len(dirs) > 0 {
		t.Fatalf("container cgroups left: %v", dirs)
	}
	// (No dial to addr here: with the bridge gone 10.231.x.y routes to the
	// machine's default gateway, which may accept anything.)
}

// TestDownAfterKilledRun: a test process killed with its fleet up (no
// Close, no t.Cleanup) leaves namespaces, daemons and the bridge; Down,
// reading the state file, removes them all.
func TestDownAfterKilledRun(t *testing.T) {
	if os.Getenv("TESTFLEET_CHILD") == "1" {
		f, err := Up(context.Background(), Options{Name: "tfkill", Nodes: 2})
		if err != nil {
			fmt.Println("UP FAILED:", err)
			os.Exit(2)
		}
		fmt.Println("UP", f.Dir())
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDownAfterKilledRun$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TESTFLEET_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || !strings.Contains(string(out), "UP ") {
		t.Fatalf("child: %v: %s", err, out)
	}
	st, err := readState(filepath.Join(DefaultBase, "tfkill"))
	if err != nil {
		t.Fatalf("state left by the killed run: %v", err)
	}
	var pids []int
	for _, n := range st.Nodes {
		pids = append(pids, n.HolderPID, n.SSHDPID)
		if !processAlive(n.SSHDPID) {
			t.Fatalf("node %s's sshd did not outlive the killed run: the test proves nothing", n.Name)
		}
	}
	if left := leftovers(t, "tfkill", st.Dir, pids); len(left) == 0 {
		t.Fatal("the killed run left nothing: the test proves nothing")
	}
	// A new Up of the same name reclaims the dead run's fleet (owner pid gone).
	f := New(t, Options{Name: "tfkill", Nodes: 1})
	if out, err := f.SSH(f.Node(1), "true"); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	for _, p := range pids {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p)); err == nil && !strings.Contains(string(b), ") Z ") {
			t.Fatalf("process %d of the dead run survives the reclaim: %s", p, b)
		}
	}
	if err := Down(DefaultBase, "tfkill", t.Logf); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, "tfkill", st.Dir, pids); len(left) > 0 {
		t.Fatalf("after Down:\n%s", strings.Join(left, "\n"))
	}
}

// TestTwoFleetsAtOnce: fleets of different names (two test packages) run
// side by side on distinct bridges and subnets; closing one leaves the other.
func TestTwoFleetsAtOnce(t *testing.T) {
	existedBefore := map[string]bool{}
	for _, p := range append(append([]string{}, NodePaths...), NASPath) {
		_, err := os.Stat(p)
		existedBefore[p] = err == nil
	}
	f1 := New(t, Options{Name: "tfpa", Nodes: 1})
	f2 := New(t, Options{Name: "tfpb", Nodes: 1})
	if f1.Bridge() == f2.Bridge() || f1.ControlIP() == f2.ControlIP() {
		t.Fatalf("fleets share bridge %s/%s or address %s/%s", f1.Bridge(), f2.Bridge(), f1.ControlIP(), f2.ControlIP())
	}
	// A third fleet asking for f1's subnet is refused, naming f1.
	_, err := Up(context.Background(), Options{Name: "tfpc", Nodes: 1, Subnet: f1.st.Subnet})
	if err == nil || !strings.Contains(err.Error(), "tfpa") || !strings.Contains(err.Error(), "subnet") {
		t.Fatalf("Up on a used subnet: %v; want an error naming fleet tfpa", err)
	}
	// The same name twice while the first is live is refused.
	if _, err := Up(context.Background(), Options{Name: "tfpa", Nodes: 1}); err == nil || !strings.Contains(err.Error(), "already up") {
		t.Fatalf("second Up of tfpa: %v", err)
	}
	for _, bad := range []Options{{Name: "Bad_Name", Nodes: 1}, {Name: "toolongname", Nodes: 1}, {Name: "ok", Nodes: 9}} {
		if _, err := Up(context.Background(), bad); err == nil {
			t.Errorf("Up(%+v) accepted", bad)
		}
	}
	if err := f1.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := f2.SSH(f2.Node(1), "ls /mnt/nvme /mnt/nas >/dev/null && echo ok"); err != nil || string(out) != "ok\n" {
		t.Fatalf("fleet tfpb after tfpa closed: %v %q", err, out)
	}
	// A crashed service on one node: KillByName hits only that node.
	n := f2.Node(1)
	if k, err := f2.KillByName(n, "sshd", syscall.SIGKILL); err != nil || k < 1 {
		t.Fatalf("KillByName sshd: %d %v", k, err)
	}
	if _, err := f2.SSH(n, "true"); err == nil {
		t.Fatal("sshd answers after KillByName")
	}
	// The last fleet down removes the mount points fleets created on the
	// host, whichever fleet created them.
	if err := f2.Close(); err != nil {
		t.Fatal(err)
	}
	if others, _ := List(""); len(others) > 0 {
		t.Logf("fleets %v of another package are up: they keep the mount points", others)
		return
	}
	for _, p := range append(append([]string{}, NodePaths...), NASPath) {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) && !existedBefore[p] {
			t.Errorf("mount point %s left on the host after the last fleet: %v", p, err)
		}
	}
}
