package testfleet

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/node"
)

// DefaultBase is where fleets keep their state and per-node directories:
// a fixed place so `scripts/testfleet down` finds fleets of killed runs.
const DefaultBase = "/run/sparklane-testfleet"

// NASPath is where every node sees the shared, read-only NAS directory,
// the same path on all nodes as shared_roots require.
const NASPath = "/mnt/nas"

// NodePaths are the node-local directories: on each node they are bind
// mounts of that node's own directory, so a write on one node is invisible
// to the others and to the control host. They include every directory
// `starter fleet install` writes (fleet.DefaultLayout), so tests install at
// the real default paths.
var NodePaths = []string{"/mnt/nvme", "/var/lib/sparklane", "/etc/sparklane", "/run/sparklane", "/etc/systemd/system", "/usr/local/lib/sparklane"}

// NodeDockerSocket is the node dockerd's socket as seen on the node (over
// SSH); Node.DockerSocket is the same socket as seen from the control host.
const NodeDockerSocket = "/run/sparklane/docker.sock"

const (
	sshdBin    = "/usr/sbin/sshd"
	maxNodes   = 8
	nodeIPBase = 10 // node i gets .(10+i)
)

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)

// Options choose the fleet's name, size and parts.
type Options struct {
	// Name keeps fleets of different test packages apart: it names the
	// bridge, namespaces, interfaces and picks the subnet ([a-z][a-z0-9]{0,7}).
	Name string
	// Nodes is how many hosts (1..8).
	Nodes int
	// Docker starts a dockerd per node; off by default because each takes
	// seconds to start.
	Docker bool
	// Subnet is the third octet of 10.231.X.0/24; 0 derives it from Name.
	Subnet int
	// Base overrides DefaultBase (state and per-node directories).
	Base string
	// Persistent marks a fleet made by scripts/testfleet: no test process
	// owns it, so a later Up of the same name refuses instead of reclaiming it.
	Persistent bool
	// Logf receives progress lines (optional).
	Logf func(format string, args ...any)
}

// Node is one host of the fleet.
type Node struct {
	// Index is 1..N; Name is "h1".."hN" (the SSH target's host name is IP).
	Index int    `json:"index"`
	Name  string `json:"name"`
	// Hostname is the node's own host name (NAME-hN, its own UTS namespace).
	Hostname string `json:"hostname"`
	// IP is the node's address on the fleet bridge (10.231.X.(10+i)).
	IP string `json:"ip"`
	// NetNS is the `ip netns` name (/run/netns/NetNS).
	NetNS string `json:"netns"`
	// Veth is the host-side interface; LinkDown/LinkUp switch it.
	Veth string `json:"veth"`
	// Dir holds the node's own directories, keys and logs on the host.
	Dir string `json:"dir"`
	// HolderPID is the long-lived process whose mount namespace is the
	// node's; everything on the node is entered through its namespaces.
	HolderPID int `json:"holder_pid"`
	// SSHDPID is the listening sshd (0 when stopped).
	SSHDPID int `json:"sshd_pid"`
	// DockerPID is the node's dockerd (0 without Docker).
	DockerPID int `json:"docker_pid"`
	// DockerSocket is the node dockerd's socket path on the control host
	// (a test's own Docker client dials unix://DockerSocket).
	DockerSocket string `json:"docker_socket,omitempty"`
	// CgroupParent is the cgroup the node dockerd puts containers in.
	CgroupParent string `json:"cgroup_parent,omitempty"`
	// HostKey is the node's ed25519 host key (authorized_keys format).
	HostKey string `json:"host_key"`
}

// SSHAddr is root@IP:22, the form a fleet config's `ssh` key takes.
func (n *Node) SSHAddr() string { return "root@" + net.JoinHostPort(n.IP, "22") }

// state is what state.json records: everything Down must remove.
type state struct {
	Name       string   `json:"name"`
	Dir        string   `json:"dir"`
	Subnet     int      `json:"subnet"`
	Bridge     string   `json:"bridge"`
	BridgeIP   string   `json:"bridge_ip"`
	OwnerPID   int      `json:"owner_pid"`
	Persistent bool     `json:"persistent"`
	Docker     bool     `json:"docker"`
	Iptables   bool     `json:"iptables_rule"`
	Mountdirs  []string `json:"created_mountpoints,omitempty"`
	Nodes      []*Node  `json:"nodes"`
}

// Fleet is a running fleet; Close removes all of it.
type Fleet struct {
	st   state
	logf func(string, ...any)
	// procs are processes this process started and must reap.
	procs []*exec.Cmd
}

// Name is the fleet's name.
func (f *Fleet) Name() string { return f.st.Name }

// Dir is the fleet's directory on the host (state.json, keys, node dirs).
func (f *Fleet) Dir() string { return f.st.Dir }

// Nodes are the fleet's hosts in index order.
func (f *Fleet) Nodes() []*Node { return f.st.Nodes }

// Node returns node i (1-based), panicking on a wrong index (a test bug).
func (f *Fleet) Node(i int) *Node {
	if i < 1 || i > len(f.st.Nodes) {
		panic(fmt.Sprintf("testfleet %s: node %d out of 1..%d", f.st.Name, i, len(f.st.Nodes)))
	}
	return f.st.Nodes[i-1]
}

// ControlIP is the bridge's address: the control host as the nodes see it.
func (f *Fleet) ControlIP() string { return f.st.BridgeIP }

// Bridge is the name of the fleet's bridge interface.
func (f *Fleet) Bridge() string { return f.st.Bridge }

// KnownHostsFile lists every node's host key as `IP key` lines.
func (f *Fleet) KnownHostsFile() string { return filepath.Join(f.st.Dir, "known_hosts") }

// IdentityFile is root's private key, authorized on every node.
func (f *Fleet) IdentityFile() string { return filepath.Join(f.st.Dir, "id_ed25519") }

// NASDir is the host directory every node sees read-only at NASPath;
// tests put the "NAS" content here.
func (f *Fleet) NASDir() string { return filepath.Join(f.st.Dir, "nas") }

// HostPath is where path (one of NodePaths or below) of node n lives on
// the control host.
func (f *Fleet) HostPath(n *Node, path string) (string, error) {
	for _, p := range NodePaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return filepath.Join(n.Dir, "root", mountDirName(p), strings.TrimPrefix(path, p)), nil
		}
	}
	return "", fmt.Errorf("testfleet: %s is not node-local on %s (node-local: %s)", path, n.Name, strings.Join(NodePaths, ", "))
}

// Target is the node.SSHTarget that reaches node n's sshd with the fleet's keys.
func (f *Fleet) Target(n *Node) node.SSHTarget {
	return node.SSHTarget{User: "root", Host: n.IP, Port: 22, KnownHosts: f.KnownHostsFile(), Identity: f.IdentityFile()}
}

func mountDirName(p string) string { return strings.ReplaceAll(strings.TrimPrefix(p, "/"), "/", "_") }

func (f *Fleet) log(format string, args ...any) {
	if f.logf != nil {
		f.logf(format, args...)
	}
}

// Up creates the fleet. On any error it removes what it created and
// returns an error naming the step and node.
func Up(ctx context.Context, opts Options) (f *Fleet, err error) {
	if opts.Name == "" {
		opts.Name = "tf"
	}
	if !nameRE.MatchString(opts.Name) {
		return nil, fmt.Errorf("testfleet: name %q must match %s (it names interfaces, which allow 15 characters)", opts.Name, nameRE)
	}
	if opts.Nodes < 1 || opts.Nodes > maxNodes {
		return nil, fmt.Errorf("testfleet %s: %d nodes: choose 1..%d", opts.Name, opts.Nodes, maxNodes)
	}
	if opts.Base == "" {
		opts.Base = DefaultBase
	}
	if opts.Subnet == 0 {
		h := fnv.New32a()
		h.Write([]byte(opts.Name))
		opts.Subnet = int(h.Sum32()%250) + 1
	}
	if opts.Subnet < 1 || opts.Subnet > 254 {
		return nil, fmt.Errorf("testfleet %s: subnet octet %d: choose 1..254", opts.Name, opts.Subnet)
	}
	if err := preflight(opts); err != nil {
		return nil, err
	}
	if err := reclaim(opts); err != nil {
		return nil, err
	}
	dir := filepath.Join(opts.Base, opts.Name)
	f = &Fleet{logf: opts.Logf, st: state{
		Name: opts.Name, Dir: dir, Subnet: opts.Subnet,
		Bridge:   "slb-" + opts.Name,
		BridgeIP: fmt.Sprintf("10.231.%d.1", opts.Subnet),
		OwnerPID: os.Getpid(), Persistent: opts.Persistent, Docker: opts.Docker,
	}}
	if opts.Persistent {
		f.st.OwnerPID = 0
	}
	defer func() {
		if err != nil {
			if cerr := f.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("cleanup after failed up: %w", cerr))
			}
			f = nil
		}
	}()
	if err := os.MkdirAll(filepath.Join(dir, "nas"), 0o755); err != nil {
		return f, fmt.Errorf("testfleet %s: %w", opts.Name, err)
	}
	if err := f.save(); err != nil {
		return f, err
	}
	if err := f.upNetwork(ctx); err != nil {
		return f, err
	}
	if err := f.writeKeys(opts.Nodes); err != nil {
		return f, err
	}
	for i := 1; i <= opts.Nodes; i++ {
		if err := f.upNode(ctx, i); err != nil {
			return f, err
		}
	}
	if err := f.writeKnownHosts(); err != nil {
		return f, err
	}
	for _, n := range f.st.Nodes {
		if err := f.StartSSHD(ctx, n); err != nil {
			return f, err
		}
	}
	if opts.Docker {
		// Start every dockerd first, then wait: they start in parallel.
		for _, n := range f.st.Nodes {
			if err := f.startDocker(n); err != nil {
				return f, err
			}
		}
		for _, n := range f.st.Nodes {
			if err := f.waitDocker(ctx, n); err != nil {
				return f, err
			}
		}
	}
	return f, f.save()
}

// preflight names the missing tool or kernel feature before anything is created.
func preflight(opts Options) error {
	var missing []string
	for _, c := range []struct{ bin, pkg string }{
		{"ip", "iproute2"}, {"nsenter", "util-linux"}, {"unshare", "util-linux"},
		{"mount", "mount"}, {"iptables", "iptables"},
	} {
		if _, err := exec.LookPath(c.bin); err != nil {
			missing = append(missing, fmt.Sprintf("%s (apt-get install -y %s)", c.bin, c.pkg))
		}
	}
	if _, err := os.Stat(sshdBin); err != nil {
		missing = append(missing, sshdBin+" (apt-get install -y openssh-server)")
	}
	if opts.Docker {
		if _, err := exec.LookPath("dockerd"); err != nil {
			missing = append(missing, "dockerd (apt-get install -y docker.io)")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("testfleet %s: missing on this machine: %s", opts.Name, strings.Join(missing, "; "))
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("testfleet %s: must run as root (it creates namespaces, a bridge and mounts)", opts.Name)
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return fmt.Errorf("testfleet %s: mkdir /run/sshd (sshd's privilege separation dir): %w", opts.Name, err)
	}
	return nil
}

// reclaim removes a same-named fleet whose owner process is gone and
// refuses to share a subnet with another live fleet.
func reclaim(opts Options) error {
	ents, _ := os.ReadDir(opts.Base)
	for _, e := range ents {
		st, err := readState(filepath.Join(opts.Base, e.Name()))
		if err != nil {
			continue
		}
		if st.Name == opts.Name {
			if st.Persistent || (st.OwnerPID != 0 && processAlive(st.OwnerPID)) {
				return fmt.Errorf("testfleet %s: already up (state %s, owner pid %d); run `scripts/testfleet down %s` first",
					opts.Name, filepath.Join(st.Dir, "state.json"), st.OwnerPID, opts.Name)
			}
			if err := Down(opts.Base, opts.Name, opts.Logf); err != nil {
				return fmt.Errorf("testfleet %s: removing the fleet left by dead pid %d: %w", opts.Name, st.OwnerPID, err)
			}
			continue
		}
		if st.Subnet == opts.Subnet {
			return fmt.Errorf("testfleet %s: subnet 10.231.%d.0/24 is used by fleet %s (%s); pick another name or Options.Subnet",
				opts.Name, opts.Subnet, st.Name, st.Dir)
		}
	}
	return nil
}

func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

func readState(dir string) (*state, error) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "state.json"), err)
	}
	return &st, nil
}

// save writes state.json (temp + rename) after every creation step, so a
// run killed at any point leaves a list Down can follow.
func (f *Fleet) save() error {
	b, err := json.MarshalIndent(&f.st, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(filepath.Join(f.st.Dir, "state.json"), b, 0o600); err != nil {
		return fmt.Errorf("testfleet %s: write state: %w", f.st.Name, err)
	}
	return nil
}

func run(ctx context.Context, argv ...string) error {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func iptablesRule(bridge string) []string {
	return []string{"FORWARD", "-i", bridge, "-o", bridge, "-m", "comment", "--comment", "sparklane-testfleet", "-j", "ACCEPT"}
}

func (f *Fleet) upNetwork(ctx context.Context) error {
	br := f.st.Bridge
	if _, err := net.InterfaceByName(br); err == nil {
		return fmt.Errorf("testfleet %s: interface %s already exists (another fleet of this name?); run `scripts/testfleet down %s`", f.st.Name, br, f.st.Name)
	}
	if err := run(ctx, "ip", "link", "add", br, "type", "bridge"); err != nil {
		return fmt.Errorf("testfleet %s: create bridge (needs the bridge kernel module): %w", f.st.Name, err)
	}
	if err := f.save(); err != nil {
		return err
	}
	if err := run(ctx, "ip", "addr", "add", f.st.BridgeIP+"/24", "dev", br); err != nil {
		return fmt.Errorf("testfleet %s: %w", f.st.Name, err)
	}
	if err := run(ctx, "ip", "link", "set", br, "up"); err != nil {
		return fmt.Errorf("testfleet %s: %w", f.st.Name, err)
	}
	// Docker sets FORWARD's policy to DROP and br_netfilter sends bridged
	// frames through it: without this rule nodes cannot reach each other.
	if err := run(ctx, append([]string{"iptables", "-I"}, iptablesRule(br)...)...); err != nil {
		return fmt.Errorf("testfleet %s: allow node-to-node traffic on %s: %w", f.st.Name, br, err)
	}
	f.st.Iptables = true
	return f.save()
}

func writeKey(path, comment string) (ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return sp, os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(sp), 0o644)
}

func (f *Fleet) writeKeys(n int) error {
	pub, err := writeKey(f.IdentityFile(), "sparklane testfleet "+f.st.Name+" root")
	if err != nil {
		return fmt.Errorf("testfleet %s: client key: %w", f.st.Name, err)
	}
	return os.WriteFile(filepath.Join(f.st.Dir, "authorized_keys"), ssh.MarshalAuthorizedKey(pub), 0o600)
}

func (f *Fleet) writeKnownHosts() error {
	var b strings.Builder
	for _, n := range f.st.Nodes {
		fmt.Fprintf(&b, "%s %s\n", n.IP, n.HostKey)
	}
	return os.WriteFile(f.KnownHostsFile(), []byte(b.String()), 0o600)
}

func nsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// poll calls cond every interval until it returns true or err, or the
// timeout passes (then the last error is returned with what).
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not ready after %s: %v", what, timeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// startBG starts a long-lived process in its own session with output to
// logPath; it is reaped by this process while it lives.
func (f *Fleet) startBG(logPath string, argv ...string) (*exec.Cmd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if logPath != "" {
		lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		defer lf.Close()
		cmd.Stdout, cmd.Stderr = lf, lf
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	f.procs = append(f.procs, cmd)
	go func() { _ = cmd.Wait() }()
	return cmd, nil
}

// upNode brings node i up: its directories, network namespace and veth,
// the namespace holder, the mounts, and sshd's host key and config. The
// fleet's state is saved after every step that made something Down must
// undo.
func (f *Fleet) upNode(ctx context.Context, i int) error {
	n := &Node{
		Index: i, Name: fmt.Sprintf("h%d", i),
		IP:       fmt.Sprintf("10.231.%d.%d", f.st.Subnet, nodeIPBase+i),
		NetNS:    fmt.Sprintf("sl-%s-h%d", f.st.Name, i),
		Veth:     fmt.Sprintf("slv-%s-%d", f.st.Name, i),
		Dir:      filepath.Join(f.st.Dir, fmt.Sprintf("h%d", i)),
		Hostname: fmt.Sprintf("%s-h%d", f.st.Name, i),
	}
	f.st.Nodes = append(f.st.Nodes, n)
	if err := f.makeNodeDirs(n); err != nil {
		return err
	}
	if err := f.save(); err != nil {
		return err
	}
	if err := f.wireNode(ctx, n); err != nil {
		return err
	}
	if err := f.startHolder(ctx, n); err != nil {
		return err
	}
	if err := f.makeMountPoints(n); err != nil {
		return err
	}
	if err := f.save(); err != nil {
		return err
	}
	if err := f.mountNodeTree(n); err != nil {
		return err
	}
	if err := f.writeSSHDConfig(n); err != nil {
		return err
	}
	return f.save()
}

// nodeErr names the fleet, the node and the step that failed.
func (f *Fleet) nodeErr(n *Node, step string, err error) error {
	return fmt.Errorf("testfleet %s node %s (%s): %s: %w", f.st.Name, n.Name, n.IP, step, err)
}

// makeNodeDirs creates the node's own directories: one per node path
// (bound over it later), and sshd's, dockerd's and containerd's.
func (f *Fleet) makeNodeDirs(n *Node) error {
	for _, p := range NodePaths {
		if err := os.MkdirAll(filepath.Join(n.Dir, "root", mountDirName(p)), 0o755); err != nil {
			return f.nodeErr(n, "node dirs", err)
		}
	}
	for _, d := range []string{"ssh", "docker", "containerd-run"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return f.nodeErr(n, "node dirs", err)
		}
	}
	return nil
}

// wireNode creates the node's network namespace and a veth pair: one end
// on the fleet's bridge, the other the node's eth0 with its IP and a
// default route through the bridge.
func (f *Fleet) wireNode(ctx context.Context, n *Node) error {
	if err := run(ctx, "ip", "netns", "add", n.NetNS); err != nil {
		return f.nodeErr(n, "network namespace", err)
	}
	peer := fmt.Sprintf("slp-%s-%d", f.st.Name, n.Index)
	if err := run(ctx, "ip", "link", "add", n.Veth, "type", "veth", "peer", "name", peer); err != nil {
		return f.nodeErr(n, "veth pair", err)
	}
	for _, argv := range [][]string{
		{"ip", "link", "set", n.Veth, "master", f.st.Bridge},
		{"ip", "link", "set", n.Veth, "up"},
		{"ip", "link", "set", peer, "netns", n.NetNS},
		{"ip", "-n", n.NetNS, "link", "set", peer, "name", "eth0"},
		{"ip", "-n", n.NetNS, "addr", "add", n.IP + "/24", "dev", "eth0"},
		{"ip", "-n", n.NetNS, "link", "set", "eth0", "up"},
		{"ip", "-n", n.NetNS, "link", "set", "lo", "up"},
		{"ip", "-n", n.NetNS, "route", "add", "default", "via", f.st.BridgeIP},
	} {
		if err := run(ctx, argv...); err != nil {
			return f.nodeErr(n, "network", err)
		}
	}
	return nil
}

// startHolder starts the holder: a process in the node's network
// namespace with its own private mount and UTS (hostname) namespaces;
// sshd and dockerd are entered into all three. It returns once the
// holder is in its own mount namespace.
func (f *Fleet) startHolder(ctx context.Context, n *Node) error {
	ns := "/run/netns/" + n.NetNS
	holder, err := f.startBG("", "nsenter", "--net="+ns, "--", "unshare", "--mount", "--uts", "--propagation", "private", "--", "sleep", "infinity")
	if err != nil {
		return f.nodeErr(n, "holder", err)
	}
	n.HolderPID = holder.Process.Pid
	if err := f.save(); err != nil {
		return err
	}
	hostMnt, err := nsInode("/proc/self/ns/mnt")
	if err != nil {
		return f.nodeErr(n, "holder", err)
	}
	if err := poll(ctx, 10*time.Second, "holder mount namespace", func() (bool, error) {
		ino, err := nsInode(fmt.Sprintf("/proc/%d/ns/mnt", n.HolderPID))
		if err != nil {
			return false, err
		}
		return ino != hostMnt, fmt.Errorf("pid %d still in the host mount namespace", n.HolderPID)
	}); err != nil {
		return f.nodeErr(n, "holder", err)
	}
	return nil
}

// makeMountPoints creates the mount points missing on the host's
// filesystem (empty directories; Down removes those it created).
func (f *Fleet) makeMountPoints(n *Node) error {
	for _, p := range append(append([]string{}, NodePaths...), NASPath, "/run/containerd") {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return f.nodeErr(n, "mount point", err)
			}
			f.st.Mountdirs = append(f.st.Mountdirs, p)
			// Also in the base's list: the last fleet down removes them,
			// whichever fleet created them.
			if err := appendLine(filepath.Join(filepath.Dir(f.st.Dir), "mountpoints"), p); err != nil {
				return f.nodeErr(n, "mount point", err)
			}
		}
	}
	return nil
}

// mountNodeTree binds, inside the node's mount namespace, its own
// directories over the node paths and /run/containerd, the NAS read-only,
// and sets its hostname.
func (f *Fleet) mountNodeTree(n *Node) error {
	var script []string
	for _, p := range NodePaths {
		script = append(script, fmt.Sprintf("mount --bind %s %s", filepath.Join(n.Dir, "root", mountDirName(p)), p))
	}
	script = append(script,
		// Hide the host's /run/containerd so the node dockerd runs its own
		// containerd (and shims) inside the node's namespaces.
		fmt.Sprintf("mount --bind %s /run/containerd", filepath.Join(n.Dir, "containerd-run")),
		fmt.Sprintf("mount --bind %s %s", f.NASDir(), NASPath),
		fmt.Sprintf("mount -o remount,bind,ro %s", NASPath),
	)
	script = append(script, "hostname "+n.Hostname)
	if out, err := f.Exec(n, "sh", "-ec", strings.Join(script, "\n")); err != nil {
		return f.nodeErr(n, "mounts", fmt.Errorf("%w: %s", err, out))
	}
	return nil
}

// writeSSHDConfig writes the node's host key (recorded in n.HostKey) and
// its sshd config: listening on the node's IP, keys only.
func (f *Fleet) writeSSHDConfig(n *Node) error {
	hk, err := writeKey(filepath.Join(n.Dir, "ssh", "host_ed25519"), "sparklane testfleet "+f.st.Name+" "+n.Name)
	if err != nil {
		return f.nodeErr(n, "host key", err)
	}
	n.HostKey = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hk)))
	sd := filepath.Join(n.Dir, "ssh")
	cfg := strings.Join([]string{
		"ListenAddress " + n.IP,
		"Port 22",
		"HostKey " + filepath.Join(sd, "host_ed25519"),
		"AuthorizedKeysFile " + filepath.Join(f.st.Dir, "authorized_keys"),
		"UsePAM no",
		"StrictModes no",
		"PidFile " + filepath.Join(sd, "sshd.pid"),
		"PermitRootLogin prohibit-password",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"AllowStreamLocalForwarding yes",
		"AllowTcpForwarding yes",
		// SFTP in its own process (sftp-server), so a node can serve as
		// a NAS host over sshfs and its reads show in /proc/PID/io.
		"Subsystem sftp /usr/lib/openssh/sftp-server",
		"GatewayPorts no",
		// The node's docker command talks to the node's own dockerd (its
		// /var/run is the machine's, whose docker.sock is another
		// daemon's), as a node with a relocated daemon sets it in its
		// login environment.
		"SetEnv DOCKER_HOST=unix://" + NodeDockerSocket,
		"LogLevel VERBOSE",
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(sd, "sshd_config"), []byte(cfg), 0o600); err != nil {
		return f.nodeErr(n, "sshd config", err)
	}
	return nil
}

// Command is argv run on node n as if at its console: entered into the
// node's network and mount namespaces (nsenter into the holder).
func (f *Fleet) Command(n *Node, argv ...string) *exec.Cmd {
	args := append([]string{"--target", strconv.Itoa(n.HolderPID), "--net", "--mount", "--uts", "--"}, argv...)
	return exec.Command("nsenter", args...)
}

// Exec runs argv on node n's console and returns its combined output; the
// error names the node and the command.
func (f *Fleet) Exec(n *Node, argv ...string) ([]byte, error) {
	out, err := f.Command(n, argv...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("testfleet %s node %s: %s: %w", f.st.Name, n.Name, strings.Join(argv, " "), err)
	}
	return out, nil
}

// StartSSHD starts node n's sshd (`sshd -f CONFIG -E LOG` inside the node)
// and waits until a real SSH handshake with the host key checked succeeds.
func (f *Fleet) StartSSHD(ctx context.Context, n *Node) error {
	sd := filepath.Join(n.Dir, "ssh")
	_ = os.Remove(filepath.Join(sd, "sshd.pid"))
	if out, err := f.Exec(n, sshdBin, "-f", filepath.Join(sd, "sshd_config"), "-E", filepath.Join(sd, "sshd.log")); err != nil {
		return fmt.Errorf("%w: %s (log %s)", err, out, filepath.Join(sd, "sshd.log"))
	}
	err := poll(ctx, 20*time.Second, fmt.Sprintf("testfleet %s node %s: sshd on %s:22", f.st.Name, n.Name, n.IP), func() (bool, error) {
		b, err := os.ReadFile(filepath.Join(sd, "sshd.pid"))
		if err != nil {
			return false, err
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return false, err
		}
		n.SSHDPID = pid
		c, err := f.SSHClient(n, 2*time.Second)
		if err != nil {
			return false, err
		}
		c.Close()
		return true, nil
	})
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(sd, "sshd.log"))
		return fmt.Errorf("%w; sshd log: %s", err, b)
	}
	return f.save()
}

// StopSSHD kills node n's listening sshd (open sessions stay, as when a
// real sshd is restarted).
func (f *Fleet) StopSSHD(n *Node) error {
	if n.SSHDPID == 0 {
		return nil
	}
	if err := syscall.Kill(n.SSHDPID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("testfleet %s node %s: kill sshd %d: %w", f.st.Name, n.Name, n.SSHDPID, err)
	}
	n.SSHDPID = 0
	return f.save()
}

// SSHClient dials node n's sshd as root with the fleet's identity, the
// host key checked against the fleet's known_hosts.
func (f *Fleet) SSHClient(n *Node, timeout time.Duration) (*ssh.Client, error) {
	hkcb, err := knownhosts.New(f.KnownHostsFile())
	if err != nil {
		return nil, fmt.Errorf("testfleet: known_hosts %s: %w", f.KnownHostsFile(), err)
	}
	kb, err := os.ReadFile(f.IdentityFile())
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(kb)
	if err != nil {
		return nil, fmt.Errorf("testfleet: identity %s: %w", f.IdentityFile(), err)
	}
	return ssh.Dial("tcp", net.JoinHostPort(n.IP, "22"), &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: hkcb, HostKeyAlgorithms: []string{ssh.KeyAlgoED25519}, Timeout: timeout,
	})
}

// SSH runs cmd on node n over SSH and returns its combined output.
func (f *Fleet) SSH(n *Node, cmd string) ([]byte, error) {
	c, err := f.SSHClient(n, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("testfleet %s node %s: ssh %s: %w", f.st.Name, n.Name, n.SSHAddr(), err)
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	if err != nil {
		return out, fmt.Errorf("testfleet %s node %s: ssh %q: %w", f.st.Name, n.Name, cmd, err)
	}
	return out, nil
}

// LinkDown cuts node n's link to the bridge (the cable pulled): the node's
// processes keep running, nothing reaches it.
func (f *Fleet) LinkDown(n *Node) error {
	return run(context.Background(), "ip", "link", "set", n.Veth, "down")
}

// LinkUp restores node n's link.
func (f *Fleet) LinkUp(n *Node) error {
	return run(context.Background(), "ip", "link", "set", n.Veth, "up")
}

// NodePIDs lists the processes running on node n (in its network or mount
// namespace, or in its dockerd's cgroup), the holder excluded.
func (f *Fleet) NodePIDs(n *Node) []int { return nodePIDs(n) }

func nodePIDs(n *Node) []int {
	netIno, _ := nsInode("/run/netns/" + n.NetNS)
	var mntIno uint64
	if n.HolderPID != 0 {
		mntIno, _ = nsInode(fmt.Sprintf("/proc/%d/ns/mnt", n.HolderPID))
	}
	seen := map[int]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == n.HolderPID || pid == os.Getpid() {
			continue
		}
		ni, err1 := nsInode(fmt.Sprintf("/proc/%d/ns/net", pid))
		mi, err2 := nsInode(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if (err1 == nil && netIno != 0 && ni == netIno) || (err2 == nil && mntIno != 0 && mi == mntIno) {
			seen[pid] = true
		}
	}
	for _, p := range cgroupProcs(n) {
		seen[p] = true
	}
	var pids []int
	for p := range seen {
		pids = append(pids, p)
	}
	return pids
}

// cgroupDirs are the node dockerd's container cgroups in every hierarchy.
func cgroupDirs(n *Node) []string {
	if n.CgroupParent == "" {
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", n.CgroupParent))
	if d := filepath.Join("/sys/fs/cgroup", n.CgroupParent); dirExists(d) {
		dirs = append(dirs, d)
	}
	return dirs
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func cgroupProcs(n *Node) []int {
	var pids []int
	for _, d := range cgroupDirs(n) {
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, fld := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(fld); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// KillNode kills every process on node n (what a power cut does), holder
// excepted so the node's namespaces stay: its sshd and dockerd are gone
// until StartSSHD/StartDocker.
func (f *Fleet) KillNode(ctx context.Context, n *Node) error {
	if err := killAll(ctx, n); err != nil {
		return fmt.Errorf("testfleet %s node %s: %w", f.st.Name, n.Name, err)
	}
	n.SSHDPID, n.DockerPID = 0, 0
	return f.save()
}

func killAll(ctx context.Context, n *Node) error {
	return poll(ctx, 20*time.Second, "processes gone", func() (bool, error) {
		pids := nodePIDs(n)
		if len(pids) == 0 {
			return true, nil
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		return false, fmt.Errorf("still running: %v", pids)
	})
}

// KillByName sends sig to node n's processes whose command name
// (/proc/PID/comm, e.g. "worker") is name, and returns how many it signalled:
// how a test crashes one service on one host.
func (f *Fleet) KillByName(n *Node, name string, sig syscall.Signal) (int, error) {
	count := 0
	for _, p := range nodePIDs(n) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p))
		if err != nil || strings.TrimSpace(string(b)) != name {
			continue
		}
		if err := syscall.Kill(p, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return count, fmt.Errorf("testfleet %s node %s: kill %s (pid %d): %w", f.st.Name, n.Name, name, p, err)
		}
		count++
	}
	return count, nil
}

func appendLine(path, line string) error {
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := fh.WriteString(line + "\n"); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}
