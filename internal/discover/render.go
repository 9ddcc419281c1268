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

// Render writes a commented sparklane.toml for hosts: nodes with their
// staging root on the NVMe, the fast-network address and RDMA devices,
// one cluster per node and one of all nodes. The output depends only on
// its input, so a re-run with nothing changed is byte-identical.
func Render(hosts []Host) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Written by `starter init`: what SSH discovery found on each node.\n")
	w("# Edit freely; re-running `starter init` shows a diff and changes nothing without --write.\n\n")
	w("state_dir = \"~/.local/state/sparklane\"\nrecipes_dir = \"recipes\"\nprobe_grace = \"5s\"\n\n")
	w("[temporal]\n# empty address: an embedded server in the control service on this machine\naddress = \"\"\nnamespace = \"default\"\n\n")
	for _, h := range hosts {
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
			w("# staging root on %s (the NVMe disk when there is one, else the one with the most free space)\nroots = [%q]\n", disk.Mount, root)
		} else {
			w("# no data disk found: set the staging root by hand\nroots = [\"/srv/sparklane\"]\n")
		}
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
	for _, h := range hosts {
		w("[[clusters]]\nname = %q\nnodes = [%q]\n\n", h.Name+"-1x", h.Name)
	}
	if len(hosts) > 1 {
		var names []string
		for _, h := range hosts {
			names = append(names, fmt.Sprintf("%q", h.Name))
		}
		w("[[clusters]]\nname = \"all-%dx\"\nnodes = [%s]\n", len(hosts), strings.Join(names, ", "))
	}
	return b.String()
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
