package discover

import (
	"fmt"
	"strings"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/node"
)

// Host is one node as the operator named it, with what was found there.
type Host struct {
	Name       string
	Target     node.SSHTarget
	SSH        string
	KnownHosts string
	Identity   string
	Facts      Facts
}

// Fleet is what init decided for the fleet as a whole, written above the
// nodes: the NAS (shared_roots), the hub cache on it (hf_cache_dir), and
// the clusters the recipes name.
type Fleet struct {
	// Shares are the mounts found on every node alike (or given:
	// SharedGiven, from --shared-root).
	Shares      Shares
	SharedGiven bool
	// HFCacheDir is the NAS hub root ("" when none was found); HFCacheNote
	// says how it was chosen, or why none is written.
	HFCacheDir  string
	HFCacheNote string
	// Clusters are those recipes name that this fleet can hold, sized for
	// them; TooLarge those it cannot (written as a comment).
	Clusters []Cluster
	TooLarge []Cluster
	// InsecureRegistries (host[:port]) are written as
	// image_insecure_registries, RegistryAuthFile as
	// image_registry_auth_file (init's --insecure-registry and
	// --registry-auth-file).
	InsecureRegistries []string
	RegistryAuthFile   string
}

// Cluster is a cluster named by recipes: its nodes (the first ones of the
// fleet, the first is the head) and the recipe files naming it.
type Cluster struct {
	Name    string   `json:"name"`
	Nodes   []string `json:"nodes,omitempty"`
	Needs   int      `json:"needs,omitempty"`
	Recipes []string `json:"recipes"`
}

// StateRoot is the per-lane state directory init adds to every node's
// roots: recipes bind it into containers and clear receipts under it
// (/var/lib/sparklane/state/LANE), apart from the node service's own
// state in /var/lib/sparklane.
const StateRoot = "/var/lib/sparklane/state"

// Render writes a commented sparklane.toml for hosts: the NAS and its hub
// cache, nodes with their staging root on the NVMe (and StateRoot), the
// fast-network address and RDMA devices, one cluster per node, one of all
// nodes (the default cluster) and those the recipes name. The output
// depends only on its input, so a re-run with nothing changed is
// byte-identical.
func Render(hosts []Host, fl Fleet) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Written by `starter init`: what SSH discovery found on each node.\n")
	w("# Edit freely; re-running `starter init` shows a diff and changes nothing without --write.\n\n")
	w("state_dir = \"~/.local/state/sparklane\"\nrecipes_dir = \"recipes\"\nprobe_grace = \"5s\"\n")
	if len(hosts) > 0 {
		w("# where a recipe that names no cluster (a sparkrun recipe) runs: all the nodes\ndefault_cluster = %q\n", allCluster(hosts))
	}
	renderShared(w, fl)
	renderRegistries(w, fl)
	w("\n[temporal]\n# empty address: an embedded server in the control service on this machine\naddress = \"\"\nnamespace = \"default\"\n\n")
	for _, h := range hosts {
		renderNode(w, h)
	}
	renderClusters(w, hosts, fl)
	return b.String()
}

// allCluster is the name of the cluster of every node ("all-3x"; one
// node's own "dgx1-1x").
func allCluster(hosts []Host) string {
	if len(hosts) == 1 {
		return hosts[0].Name + "-1x"
	}
	return fmt.Sprintf("all-%dx", len(hosts))
}

// renderShared writes shared_roots and hf_cache_dir, or says why not.
func renderShared(w func(string, ...any), fl Fleet) {
	switch {
	case len(fl.Shares.Mounts) == 0:
		w("# shared_roots: no filesystem is mounted at the same path on every node, so none is\n# written: mount the NAS alike on every node and re-run init, or name it with --shared-root.\n")
	case fl.SharedGiven:
		w("# The NAS, as given with --shared-root: staging reads it alike on every node.\n")
	default:
		w("# The NAS: the same filesystem at the same path on every node, so staging reads it\n# alike everywhere (fs_root never prefixes it):\n")
		for _, m := range fl.Shares.Mounts {
			w("#   %s: %s (%s)\n", m.Path, m.Source, m.FSType)
		}
	}
	for _, n := range fl.Shares.Notes {
		w("# not shared: %s\n", n)
	}
	if paths := fl.Shares.Paths(); len(paths) > 0 {
		w("shared_roots = [%s]\n", quoteList(paths))
	}
	if fl.HFCacheDir != "" {
		w("# %s\nhf_cache_dir = %q\n", fl.HFCacheNote, fl.HFCacheDir)
	} else if fl.HFCacheNote != "" {
		w("# hf_cache_dir: %s\n", fl.HFCacheNote)
	}
}

// renderRegistries writes image_insecure_registries and
// image_registry_auth_file when given, each with what it means.
func renderRegistries(w func(string, ...any), fl Fleet) {
	if len(fl.InsecureRegistries) > 0 {
		w("# Registries the nodes pull lanes' images from over plain HTTP, or HTTPS without\n" +
			"# verifying the certificate, with sparklane's own registry client: nothing is\n" +
			"# configured in any node's Docker (no insecure-registries there).\n")
		w("image_insecure_registries = [%s]\n", quoteList(fl.InsecureRegistries))
	}
	if fl.RegistryAuthFile != "" {
		w("# Registry logins (a Docker config.json) on this control host: a pulling node is\n" +
			"# handed only its registry's entry, for one pull; unset, the control host's own\n" +
			"# Docker logins are used ($DOCKER_CONFIG/config.json, else ~/.docker/config.json).\n")
		w("image_registry_auth_file = %q\n", fl.RegistryAuthFile)
	}
}

// renderNode writes one [[nodes]] table.
func renderNode(w func(string, ...any), h Host) {
	f := h.Facts
	w("[[nodes]]\nname = %q\nssh = %q\n", h.Name, h.SSH)
	if h.KnownHosts != "" {
		w("known_hosts = %q\n", h.KnownHosts)
	}
	if h.Identity != "" {
		w("identity = %q\n", h.Identity)
	}
	for _, d := range f.Disks {
		if !skipMount(d.Mount) {
			// Free space is printed by init, not written here: it
			// changes by the minute, and a re-run must show no diff
			// when the node did not change.
			w("# disk %s on %s: %s\n", d.Device, d.Mount, contract.HumanBytes(d.Size))
		}
	}
	root, disk, ok := f.Root()
	if ok {
		w("# staging root on %s (the NVMe disk when there is one, else the one with the most free space),\n", disk.Mount)
	} else {
		w("# no data disk found: set the staging root by hand,\n")
		root = "/srv/sparklane"
	}
	w("# and the lanes' own state (bound into containers, cleared by [hooks] clear)\nroots = [%q, %q]\n", root, StateRoot)
	addr, netdev := f.FastAddress()
	if addr != "" {
		w("# address on the fast network (%s)\naddress = %q\n", netdev, addr)
	} else {
		w("# no RDMA netdev with an IPv4 address: the SSH host\naddress = %q\n", h.Target.Host)
	}
	if hcas, nets := f.HCAs(); len(hcas) > 0 {
		w("# RDMA devices (/sys/class/infiniband) and their netdevs, for NCCL\nhca = %q\n", strings.Join(hcas, ","))
		if len(nets) > 0 {
			w("ifname = %q\n", strings.Join(nets, ","))
		}
	}
	if f.Memory >= 1e9 {
		w("# memory lanes are fitted against (MemTotal; a DGX Spark's is shared by CPU and GPU)\ngpu_memory = \"%dGB\"\n", f.Memory/1e9)
	}
	if f.DockerHost != "" {
		w("# the node's DOCKER_HOST: the daemon its own docker command talks to\ndocker = %q\n", f.DockerHost)
	}
	switch {
	case !f.Docker:
		w("# Docker: NOT FOUND — install it before serving lanes here\n")
	case f.NvidiaRuntime:
		w("# Docker with the NVIDIA runtime\n")
	default:
		w("# Docker without the NVIDIA runtime (install nvidia-container-toolkit for GPU lanes)\n")
	}
	if len(f.GPUs) == 0 {
		w("# GPUs: none found (nvidia-smi)\n")
	} else {
		w("# GPUs (%d): %s\n", len(f.GPUs), strings.Join(f.GPUs, "; "))
	}
	w("\n")
}

// renderClusters writes one cluster per node, the cluster of all nodes,
// the clusters recipes name that the fleet holds, and a comment for those
// it does not.
func renderClusters(w func(string, ...any), hosts []Host, fl Fleet) {
	for _, h := range hosts {
		w("[[clusters]]\nname = %q\nnodes = [%q]\n\n", h.Name+"-1x", h.Name)
	}
	if len(hosts) > 1 {
		var names []string
		for _, h := range hosts {
			names = append(names, h.Name)
		}
		w("[[clusters]]\nname = %q\nnodes = [%s]\n\n", allCluster(hosts), quoteList(names))
	}
	for _, c := range fl.Clusters {
		w("# named by %s: the first %d node(s), the first the head; set topology\n# (switch | pair | ring | mesh) to the fabric for its NCCL env\n", strings.Join(c.Recipes, ", "), len(c.Nodes))
		w("[[clusters]]\nname = %q\nnodes = [%s]\n\n", c.Name, quoteList(c.Nodes))
	}
	for _, c := range fl.TooLarge {
		w("# cluster %s (named by %s) needs %d nodes; this fleet has %d: not written\n# (`starter lanes` lists its lanes as such)\n", c.Name, strings.Join(c.Recipes, ", "), c.Needs, len(hosts))
	}
}

// quoteList is a TOML array's items: "a", "b".
func quoteList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// Diff is a line diff of old → new ("-" and "+" lines, unchanged lines
// left out, "@@ line N" before each change); "" when they are equal.
func Diff(old, new string) string {
	if old == new {
		return ""
	}
	a, b := strings.Split(old, "\n"), strings.Split(new, "\n")
	// Longest common subsequence table (configs are small).
	l := make([][]int, len(a)+1)
	for i := range l {
		l[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				l[i][j] = l[i+1][j+1] + 1
			} else {
				l[i][j] = max(l[i+1][j], l[i][j+1])
			}
		}
	}
	var out strings.Builder
	i, j, inHunk := 0, 0, false
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i, j, inHunk = i+1, j+1, false
		case i < len(a) && (j == len(b) || l[i+1][j] >= l[i][j+1]):
			if !inHunk {
				fmt.Fprintf(&out, "@@ line %d\n", j+1)
				inHunk = true
			}
			fmt.Fprintf(&out, "-%s\n", a[i])
			i++
		default:
			if !inHunk {
				fmt.Fprintf(&out, "@@ line %d\n", j+1)
				inHunk = true
			}
			fmt.Fprintf(&out, "+%s\n", b[j])
			j++
		}
	}
	return out.String()
}
