package discover

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/sparklane/sparklane/internal/node"
)

// Mount is one filesystem mounted on a node: a line of
// /proc/self/mountinfo.
type Mount struct {
	// Path is where it is mounted.
	Path string
	// Root is the directory of the filesystem mounted there: "/" for a
	// whole filesystem, another for a bind mount.
	Root string
	// FSType and Source are what mount(8) shows (nfs4, nas:/export).
	FSType string
	Source string
	// Dev is the filesystem's major:minor.
	Dev string
	// ReadOnly is a mount with the ro option: no staging root.
	ReadOnly bool
}

// parseMountinfo reads one mountinfo line (proc(5)): ID, parent ID,
// major:minor, root, mount point, options, optional fields, "-", type,
// source, super options; paths escape space, tab, newline and backslash
// in octal.
func parseMountinfo(line string) (Mount, bool) {
	f := strings.Fields(line)
	sep := slices.Index(f, "-")
	if sep < 6 || len(f) < sep+3 {
		return Mount{}, false
	}
	ro := slices.Contains(strings.Split(f[5], ","), "ro")
	return Mount{Dev: f[2], Root: unescapeMount(f[3]), Path: unescapeMount(f[4]), FSType: f[sep+1], Source: unescapeMount(f[sep+2]), ReadOnly: ro}, true
}

// unescapeMount undoes the kernel's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// networkFS are the filesystem types served from elsewhere (or shared by
// several hosts on one device): only these, and bind mounts, can be the
// same filesystem on two nodes.
var networkFS = map[string]bool{
	"nfs": true, "nfs4": true, "cifs": true, "smb3": true, "smbfs": true, "ceph": true, "glusterfs": true,
	"lustre": true, "beegfs": true, "gpfs": true, "9p": true, "virtiofs": true, "ocfs2": true, "gfs2": true,
	"afs": true, "orangefs": true, "wekafs": true,
}

// localFUSE are FUSE filesystems that are each host's own.
var localFUSE = map[string]bool{"fuse.lxcfs": true, "fuse.gvfsd-fuse": true, "fuse.portal": true, "fuse.snapfuse": true, "fuse.xdg-document-portal": true}

// networked reports whether m is a network filesystem (NFS, SMB, Ceph, a
// FUSE one such as sshfs or s3fs).
func networked(m Mount) bool {
	return networkFS[m.FSType] || (strings.HasPrefix(m.FSType, "fuse.") && !localFUSE[m.FSType])
}

// shareable reports whether m could be a filesystem other nodes mount
// too: a network filesystem, or a directory of a block device bound here
// (on one machine's network-namespace test fleet, the NAS is that). A
// whole local disk is each node's own even where every node calls it
// /dev/nvme0n1p1: never. System paths never are.
func shareable(m Mount) bool {
	if m.Path == "/" || skipMount(m.Path) || strings.HasPrefix(m.Path, "/var/lib/containers") {
		return false
	}
	return networked(m) || (strings.HasPrefix(m.Source, "/dev/") && m.Root != "/")
}

// SharedMount is a filesystem every node mounts at the same path: the NAS
// that staging reads from (shared_roots).
type SharedMount struct {
	Path   string `json:"path"`
	FSType string `json:"fstype"`
	Source string `json:"source"`
}

// Shares is what SharedMounts found: the shared mounts, and why mounts
// that look like a NAS are not among them (said, so the operator can fix
// the mount or name the root).
type Shares struct {
	Mounts []SharedMount `json:"mounts"`
	Notes  []string      `json:"notes,omitempty"`
}

// Paths are the shared mounts' paths: shared_roots.
func (s Shares) Paths() []string {
	var out []string
	for _, m := range s.Mounts {
		out = append(out, m.Path)
	}
	return out
}

// mountKey names the filesystem m shows: its type, source, the directory
// of it that is mounted and, for a block device, its UUID — so equal keys
// on two nodes are one filesystem.
func mountKey(m Mount, uuids map[string]string) string {
	k := m.FSType + " " + m.Source + " " + m.Root
	if strings.HasPrefix(m.Source, "/dev/") {
		k += " " + uuids[m.Dev]
	}
	return k
}

// hostMounts are one node's shareable mounts by path (the last mount at a
// path is the one seen there).
func hostMounts(f Facts, single bool) map[string]Mount {
	out := map[string]Mount{}
	for _, m := range f.Mounts {
		if shareable(m) && (!single || networked(m)) {
			out[m.Path] = m
		} else {
			delete(out, m.Path) // mounted over
		}
	}
	return out
}

// SharedMounts finds the filesystems every host mounts at the same path:
// the same type, source and directory (and UUID for a block device) at
// one path everywhere. On one host only network filesystems count. A
// network filesystem mounted at different paths, on some hosts only, or
// a path holding different filesystems is a note, naming the hosts.
func SharedMounts(hosts []Host) Shares {
	var s Shares
	if len(hosts) == 0 {
		return s
	}
	per := make([]map[string]Mount, len(hosts))
	for i, h := range hosts {
		per[i] = hostMounts(h.Facts, len(hosts) == 1)
	}
	reported := map[string]bool{} // keys already said something of
	for _, p := range sortedKeys(per[0]) {
		m0 := per[0][p]
		k0 := mountKey(m0, hosts[0].Facts.UUIDs)
		same, everywhere := true, true
		for i := range hosts[1:] {
			m, ok := per[i+1][p]
			if !ok {
				everywhere = false
				break
			}
			same = same && mountKey(m, hosts[i+1].Facts.UUIDs) == k0
		}
		switch {
		case everywhere && same:
			s.Mounts = append(s.Mounts, SharedMount{Path: p, FSType: m0.FSType, Source: m0.Source})
			reported[k0] = true
		case everywhere && networked(m0):
			var which []string
			for i, h := range hosts {
				m := per[i][p]
				which = append(which, fmt.Sprintf("%s has %s (%s)", h.Name, m.Source, m.FSType))
				reported[mountKey(m, h.Facts.UUIDs)] = true
			}
			s.Notes = append(s.Notes, fmt.Sprintf("%s is not one filesystem on every node (%s): not a shared root", p, strings.Join(which, ", ")))
		}
	}
	s.Notes = append(s.Notes, scattered(hosts, per, reported)...)
	return s
}

// scattered says, for each network filesystem not yet reported, where it
// is mounted: at different paths, or not on every node.
func scattered(hosts []Host, per []map[string]Mount, reported map[string]bool) []string {
	type place struct{ host, path string }
	where := map[string][]place{}
	desc := map[string]string{}
	for i, h := range hosts {
		for _, p := range sortedKeys(per[i]) {
			m := per[i][p]
			k := mountKey(m, h.Facts.UUIDs)
			if !networked(m) || reported[k] {
				continue
			}
			where[k] = append(where[k], place{h.Name, p})
			desc[k] = fmt.Sprintf("%s (%s)", m.Source, m.FSType)
		}
	}
	var notes []string
	for _, k := range sortedKeys(where) {
		byPath := map[string][]string{}
		on := map[string]bool{}
		for _, pl := range where[k] {
			byPath[pl.path] = append(byPath[pl.path], pl.host)
			on[pl.host] = true
		}
		var at []string
		for _, p := range sortedKeys(byPath) {
			at = append(at, fmt.Sprintf("at %s on %s", p, strings.Join(byPath[p], ", ")))
		}
		var missing []string
		for _, h := range hosts {
			if !on[h.Name] {
				missing = append(missing, h.Name)
			}
		}
		n := fmt.Sprintf("%s is mounted %s", desc[k], strings.Join(at, "; "))
		if len(missing) > 0 {
			n += fmt.Sprintf(", not on %s", strings.Join(missing, ", "))
		}
		notes = append(notes, n+": a shared root is one filesystem at one path on every node — mount it so, or name the root with --shared-root")
	}
	return notes
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// hubScript lists, under each root, the Hugging Face hub caches: the
// models--ORG--NAME directories (not descended into) and any
// huggingface/hub directory (a hub with no model yet), four levels deep
// at most and for 30 s at most, so a large NAS costs a bounded walk.
func hubScript(roots []string) string {
	var b strings.Builder
	b.WriteString("T=; command -v timeout >/dev/null 2>&1 && T='timeout 30'\n")
	for _, r := range roots {
		fmt.Fprintf(&b, "$T find %s -mindepth 1 -maxdepth 4 \\( -type d -name 'models--*' -prune -print \\) -o \\( -type d -path '*/huggingface/hub' -print \\) 2>/dev/null | head -n 1000\n", shellQuote(r))
	}
	b.WriteString("echo @@end\n")
	return b.String()
}

// FindHubs lists the Hugging Face hub caches under roots on a connected
// node (a shared root looks the same from every node, so one is asked):
// the candidates for hf_cache_dir.
func FindHubs(ctx context.Context, c *ssh.Client, roots []string) ([]string, error) {
	if len(roots) == 0 {
		return nil, nil
	}
	out, errOut, code, err := node.Run(ctx, c, hubScript(roots))
	if err != nil {
		return nil, err
	}
	if code != 0 || !strings.Contains(out, "@@end") {
		return nil, fmt.Errorf("hub search exited %d: %s", code, strings.TrimSpace(errOut))
	}
	return HubDirs(out), nil
}

// HubDirs reads hubScript's output: the parent of each models--* entry and
// each huggingface/hub directory, sorted, once each.
func HubDirs(out string) []string {
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line == "@@end" || !strings.HasPrefix(line, "/") {
			continue
		}
		if strings.HasPrefix(path.Base(line), "models--") {
			line = path.Dir(line)
		}
		seen[line] = true
	}
	return sortedKeys(seen)
}
