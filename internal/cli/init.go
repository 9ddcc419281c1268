package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"golang.org/x/term"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/discover"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/imagespec"
	"github.com/sparklane/sparklane/internal/lane"
	"github.com/sparklane/sparklane/internal/node"
)

// initJSON is `starter init --json`.
type initJSON struct {
	File    string     `json:"file"`
	Written bool       `json:"written"`
	Changed bool       `json:"changed"`
	Diff    string     `json:"diff,omitempty"`
	Nodes   []initNode `json:"nodes"`
	// SharedRoots are the mounts every node has alike (the NAS), written
	// as shared_roots; SharedNotes why others are not.
	SharedRoots []discover.SharedMount `json:"shared_roots"`
	SharedNotes []string               `json:"shared_notes,omitempty"`
	// HFCacheDir is the hub cache written as hf_cache_dir ("" none);
	// HFCacheNote how it was chosen, or why none is written.
	HFCacheDir  string `json:"hf_cache_dir"`
	HFCacheNote string `json:"hf_cache_note,omitempty"`
	// Clusters are the clusters recipes name that were written, TooLarge
	// those the fleet is too small for.
	Clusters []discover.Cluster `json:"clusters"`
	TooLarge []discover.Cluster `json:"too_large,omitempty"`
	// InsecureRegistries and RegistryAuthFile are what --insecure-registry
	// and --registry-auth-file wrote.
	InsecureRegistries []string `json:"image_insecure_registries,omitempty"`
	RegistryAuthFile   string   `json:"image_registry_auth_file,omitempty"`
}

// checkRegistryFlags checks --insecure-registry (each host[:port]) and
// --registry-auth-file (an absolute path of a file on this host).
func checkRegistryFlags(f initFlags) error {
	for _, h := range f.insecureRegistries {
		if err := imagespec.CheckRegistryHost(h); err != nil {
			return fmt.Errorf("--insecure-registry %s: %w", h, err)
		}
	}
	p := f.registryAuthFile
	if p == "" {
		return nil
	}
	if !filepath.IsAbs(p) {
		return fmt.Errorf("--registry-auth-file %q: give the absolute path of the Docker config.json on this control host (the control service reads it from there)", p)
	}
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("--registry-auth-file %s: %w (log in with docker login, or give the config.json that holds the logins)", p, err)
	}
	if st.IsDir() {
		return fmt.Errorf("--registry-auth-file %s is a directory: give the config.json in it", p)
	}
	return nil
}

type initNode struct {
	Name string `json:"name"`
	SSH  string `json:"ssh"`
	Root string `json:"root,omitempty"`
	// RootFree is the free space (bytes) under the root's disk at discovery
	// time: shown, never written to the file (it changes by the minute).
	RootFree      int64    `json:"root_free,omitempty"`
	Address       string   `json:"address,omitempty"`
	Docker        bool     `json:"docker"`
	NvidiaRuntime bool     `json:"nvidia_runtime"`
	GPUs          []string `json:"gpus"`
	RDMA          []string `json:"rdma"`
	// Memory is MemTotal (bytes), written as gpu_memory.
	Memory int64 `json:"memory,omitempty"`
}

// initFlags say how init reaches the nodes and reads their facts.
type initFlags struct {
	knownHosts, identity string
	// sharedRoots (--shared-root) replace the mounts found alike on
	// every node; hfCacheDir (--hf-cache-dir) the hub cache found there.
	sharedRoots []string
	hfCacheDir  string
	// insecureRegistries (--insecure-registry) and registryAuthFile
	// (--registry-auth-file) are written as image_insecure_registries and
	// image_registry_auth_file.
	insecureRegistries []string
	registryAuthFile   string
	// sysRoot and dockerCmd stand in for /sys and docker (test doubles).
	sysRoot, dockerCmd string
}

func (a *App) initCmd() *cobra.Command {
	var specs []string
	var f initFlags
	var out string
	var write bool
	cmd := &cobra.Command{
		Use:   "init [--node NAME=user@host[:port]...] [--known-hosts FILE] [--shared-root PATH] [--hf-cache-dir PATH] [--write]",
		Short: "discover the nodes over SSH (disks, Docker + NVIDIA runtime, GPUs, RDMA, the NAS) and write a commented sparklane.toml",
		Long: "Connects to every --node over SSH with its host key checked against --known-hosts (default\n" +
			"~/.ssh/known_hosts; add an unknown key with ssh-keyscan after checking its fingerprint), finds its\n" +
			"disks and free space, Docker and the NVIDIA runtime, GPUs, RDMA devices and their netdevs, and its\n" +
			"mounts, and writes a config: ssh as user@host:port, staging roots on the NVMe, addresses on the fast\n" +
			"network, shared_roots (the filesystems every node mounts at the same path: the NAS) and\n" +
			"hf_cache_dir (the Hugging Face hub cache on it; asked on a terminal, else --hf-cache-dir, when\n" +
			"there are several), one cluster per node, one of all nodes (the default cluster), and the\n" +
			"clusters the recipes in ./recipes name when the fleet has the nodes they need. An existing file\n" +
			"is never changed without --write: the diff is shown instead. On a terminal without --node, it asks\n" +
			"for each node's name and SSH target, and shows an unknown host key's fingerprint for you to\n" +
			"confirm before it is added to the known_hosts file.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(specs) == 0 && a.terminalIn() && !a.JSON {
				var err error
				if specs, err = a.askNodes(); err != nil {
					return err
				}
			}
			if len(specs) == 0 {
				return errors.New("name at least one node: --node dgx1=user@10.0.0.11 (repeatable), or run init on a terminal to be asked")
			}
			if out == "" {
				out = a.ConfigPath
			}
			if out == "" {
				out = "sparklane.toml"
			}
			return a.runInit(cmd.Context(), specs, f, out, write)
		},
	}
	cmd.Flags().StringArrayVar(&specs, "node", nil, "NAME=user@host[:port] (repeatable)")
	cmd.Flags().StringVar(&f.knownHosts, "known-hosts", "", "known_hosts file the host keys are checked against (default ~/.ssh/known_hosts)")
	cmd.Flags().StringVar(&f.identity, "identity", "", "private key file for SSH (default: the agent or ~/.ssh/id_*)")
	cmd.Flags().StringArrayVar(&f.sharedRoots, "shared-root", nil, "a path every node mounts alike (the NAS), instead of those found (repeatable)")
	cmd.Flags().StringVar(&f.hfCacheDir, "hf-cache-dir", "", "the Hugging Face hub cache on the NAS (models--ORG--NAME), instead of the one found")
	cmd.Flags().StringArrayVar(&f.insecureRegistries, "insecure-registry", nil, "HOST[:PORT] of a registry the nodes pull images from over plain HTTP or unverified TLS, with sparklane's own client (repeatable; nothing is set in any node's Docker)")
	cmd.Flags().StringVar(&f.registryAuthFile, "registry-auth-file", "", "a Docker config.json of registry logins on this control host, written as image_registry_auth_file (default: the control host's own Docker logins)")
	cmd.Flags().StringVar(&out, "out", "", "config file to write (default --config, else ./sparklane.toml)")
	cmd.Flags().BoolVar(&write, "write", false, "replace an existing file whose content differs")
	cmd.Flags().StringVar(&f.sysRoot, "sys-root", "", "prefix of /sys on the nodes (a test double's fake /sys tree)")
	cmd.Flags().StringVar(&f.dockerCmd, "docker-command", "docker", "the docker command looked up on the nodes")
	_ = cmd.Flags().MarkHidden("sys-root")
	_ = cmd.Flags().MarkHidden("docker-command")
	return cmd
}

// runInit discovers the nodes of specs (NAME=target), then what they
// share (the NAS, its hub cache) and the clusters the recipes beside out
// name, and writes the config to out (an existing one only with write).
func (a *App) runInit(ctx context.Context, specs []string, f initFlags, out string, write bool) error {
	// The registry flags are checked before any node is dialled.
	if err := checkRegistryFlags(f); err != nil {
		return err
	}
	var hosts []discover.Host
	var clients []*ssh.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	res := initJSON{File: out, Nodes: []initNode{}}
	seen := map[string]bool{}
	for _, s := range specs {
		name, target, ok := strings.Cut(s, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.TrimSpace(target) == "" {
			return fmt.Errorf("--node %q: write it as NAME=user@host[:port]", s)
		}
		if seen[name] {
			return fmt.Errorf("--node %s given twice", name)
		}
		seen[name] = true
		h, n, c, err := a.discoverNode(ctx, name, target, f)
		if err != nil {
			return err
		}
		hosts, clients = append(hosts, h), append(clients, c)
		res.Nodes = append(res.Nodes, n)
	}
	fl, err := a.fleetFacts(ctx, hosts, clients[0], f, out)
	if err != nil {
		return err
	}
	fl.InsecureRegistries, fl.RegistryAuthFile = f.insecureRegistries, f.registryAuthFile
	res.InsecureRegistries, res.RegistryAuthFile = f.insecureRegistries, f.registryAuthFile
	res.SharedRoots, res.SharedNotes = nonNil(fl.Shares.Mounts), fl.Shares.Notes
	res.HFCacheDir, res.HFCacheNote = fl.HFCacheDir, fl.HFCacheNote
	res.Clusters, res.TooLarge = nonNil(fl.Clusters), fl.TooLarge
	text := discover.Render(hosts, fl)
	old, err := os.ReadFile(out)
	exists := err == nil
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", out, err)
	}
	res.Diff = discover.Diff(string(old), text)
	res.Changed = !exists || res.Diff != ""
	if res.Changed && (!exists || write) {
		if err := atomicfile.Write(out, []byte(text), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", out, err)
		}
		res.Written = true
	}
	return a.output(res, func() { a.printInit(res, exists) })
}

// discoverNode dials the node name at target over SSH (an unknown host
// key confirmed on a terminal) and reads its facts: the host to render
// into the config, its line of init's output, and the connection (the
// caller closes it; the first node's is asked for the hub caches).
func (a *App) discoverNode(ctx context.Context, name, target string, fl initFlags) (discover.Host, initNode, *ssh.Client, error) {
	t, err := node.ParseSSH(target)
	if err != nil {
		return discover.Host{}, initNode{}, nil, fmt.Errorf("--node %s: %w", name, err)
	}
	t.KnownHosts, t.Identity = fl.knownHosts, fl.identity
	c, err := node.Dial(ctx, t, 20*time.Second)
	if unknownHost(err, t) && a.confirmHostKeys() {
		// An unknown host on a terminal: show its key, ask, and
		// remember it only when the operator says yes.
		if err = a.confirmHostKey(ctx, name, t); err == nil {
			c, err = node.Dial(ctx, t, 20*time.Second)
		}
	}
	if err != nil {
		return discover.Host{}, initNode{}, nil, fmt.Errorf("node %s (%s): %w", name, t, err)
	}
	f, err := discover.Probe(ctx, c, discover.Options{SysRoot: fl.sysRoot, Docker: fl.dockerCmd})
	if err != nil {
		c.Close()
		return discover.Host{}, initNode{}, nil, fmt.Errorf("node %s (%s): discovery: %w", name, t, err)
	}
	root, disk, _ := f.Root()
	addr, _ := f.FastAddress()
	hcas, _ := f.HCAs()
	// Written as user@host:port, the one form the config's check takes
	// (a user or port left out is ssh's: this user, port 22).
	n := initNode{Name: name, SSH: t.String(), Root: root, RootFree: disk.Free, Address: addr, Docker: f.Docker, NvidiaRuntime: f.NvidiaRuntime, GPUs: nonNil(f.GPUs), RDMA: nonNil(hcas), Memory: f.Memory}
	return discover.Host{Name: name, Target: t, SSH: t.String(), KnownHosts: fl.knownHosts, Identity: fl.identity, Facts: f}, n, c, nil
}

// printInit says what init found on each node and what became of the
// file (existed: it was there before).
func (a *App) printInit(res initJSON, existed bool) {
	out := res.File
	for _, n := range res.Nodes {
		mem := "-"
		if n.Memory > 0 {
			mem = lane.MemoryGB(n.Memory)
		}
		fmt.Fprintf(a.Out, "%s: root %s (%s free), address %s, docker %v (nvidia runtime %v), %d GPU(s), RDMA %s, memory %s\n",
			n.Name, dash(n.Root), contract.HumanBytes(n.RootFree), dash(n.Address), n.Docker, n.NvidiaRuntime, len(n.GPUs), dash(strings.Join(n.RDMA, ",")), mem)
	}
	a.printInitFleet(res)
	switch {
	case !res.Changed:
		fmt.Fprintf(a.Out, "%s is up to date\n", out)
	case !existed:
		fmt.Fprintf(a.Out, "wrote %s (check it with: starter recipe check %s)\n", out, out)
	default:
		fmt.Fprintf(a.Out, "%s differs from what discovery found:\n%s", out, res.Diff)
		if res.Written {
			fmt.Fprintf(a.Out, "wrote %s\n", out)
		} else {
			fmt.Fprintf(a.Out, "nothing changed: re-run with --write to apply\n")
		}
	}
}

// confirmHostKeys reports whether unknown host keys may be confirmed
// interactively: stdin is a terminal (tests set askHostKeys).
func (a *App) confirmHostKeys() bool {
	if a.askHostKeys {
		return true
	}
	return a.terminalIn() && !a.JSON
}

// terminalIn reports whether the operator types on a terminal.
func (a *App) terminalIn() bool {
	f, ok := a.In.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// readLine reads one answer from In through one buffered reader, so no
// typed-ahead line is lost between prompts.
func (a *App) readLine() (string, error) {
	if a.inLines == nil {
		a.inLines = bufio.NewReader(a.In)
	}
	s, err := a.inLines.ReadString('\n')
	if err != nil && (s == "" || !errors.Is(err, io.EOF)) {
		return strings.TrimSpace(s), err
	}
	return strings.TrimSpace(s), nil
}

// askNodes asks, on a terminal, for each node's name and SSH target until
// an empty name; a bad answer is asked again, saying what is wrong.
func (a *App) askNodes() ([]string, error) {
	fmt.Fprintln(a.Err, "Name the fleet's nodes (an empty name ends the list).")
	var specs []string
	seen := map[string]bool{}
	for {
		fmt.Fprintf(a.Err, "node %d name (e.g. dgx%d): ", len(specs)+1, len(specs)+1)
		name, err := a.readLine()
		if err != nil {
			return nil, fmt.Errorf("reading the node name: %w", err)
		}
		if name == "" {
			if len(specs) == 0 {
				return nil, errors.New("no node named: nothing to discover")
			}
			return specs, nil
		}
		if !nodeNameRE.MatchString(name) || seen[name] {
			why := "use letters, digits, '.', '_' or '-'"
			if seen[name] {
				why = "already named"
			}
			fmt.Fprintf(a.Err, "  %q: %s\n", name, why)
			continue
		}
		for {
			fmt.Fprintf(a.Err, "SSH target of %s (user@host[:port]): ", name)
			target, err := a.readLine()
			if err != nil {
				return nil, fmt.Errorf("reading the SSH target of %s: %w", name, err)
			}
			if _, perr := node.ParseSSH(target); perr != nil || !strings.Contains(target, "@") || strings.ContainsAny(target, " \t") {
				fmt.Fprintf(a.Err, "  %q: write it as user@host or user@host:port\n", target)
				continue
			}
			specs = append(specs, name+"="+target)
			seen[name] = true
			break
		}
	}
}

// nodeNameRE is what a node name may hold (it names a task queue and
// containers).
var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// confirmHostKey shows the key an unknown host offers and adds it to the
// known_hosts file when the operator types "yes".
func (a *App) confirmHostKey(ctx context.Context, name string, t node.SSHTarget) error {
	key, err := discover.HostKey(ctx, t, 20*time.Second)
	if err != nil {
		return err
	}
	file := t.KnownHosts
	if file == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return err
		}
		file = filepath.Join(home, ".ssh", "known_hosts")
	}
	fmt.Fprintf(a.Err, "node %s (%s) is not in %s.\nIt offers %s key %s.\nCompare that fingerprint with the node's own (ssh-keygen -lf /etc/ssh/ssh_host_%s_key.pub on its console).\nTrust it and add it to %s? (yes/no) ",
		name, t.Addr(), file, key.Type(), ssh.FingerprintSHA256(key), strings.TrimPrefix(key.Type(), "ssh-"), file)
	answer, _ := a.readLine()
	if a := strings.ToLower(answer); a != "yes" && a != "y" {
		return fault.Permanent(fault.UnknownHost, fmt.Errorf("host key of %s not trusted (answer %q): nothing written", t.Addr(), strings.TrimSpace(answer)))
	}
	if err := discover.TrustHostKey(file, t, key); err != nil {
		return fmt.Errorf("add the host key to %s: %w", file, err)
	}
	fmt.Fprintf(a.Err, "added %s %s for %s to %s\n", key.Type(), ssh.FingerprintSHA256(key), t.Addr(), file)
	return nil
}

// unknownHost reports whether Dial failed only because the host's key is
// not known yet: not in known_hosts, or no known_hosts file at all.
func unknownHost(err error, t node.SSHTarget) bool {
	if err == nil {
		return false
	}
	if typ, _ := fault.TypeOf(err); typ == fault.UnknownHost {
		return true
	}
	file := t.KnownHosts
	if file == "" {
		if home, herr := os.UserHomeDir(); herr == nil {
			file = filepath.Join(home, ".ssh", "known_hosts")
		}
	}
	_, serr := os.Stat(file)
	return os.IsNotExist(serr)
}
