package discover_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/discover"
)

// mnt is one /proc/self/mountinfo line.
type mnt struct{ dev, root, path, fstype, source string }

// node is a host whose discovery printed mounts (and by-uuid lines
// "UUID MAJ MIN" in hex), read back through Parse as init reads them.
func node(name string, uuids []string, mounts ...mnt) discover.Host {
	var b strings.Builder
	b.WriteString("@@mounts\n")
	// What every Linux host has: proc, sysfs, a tmpfs, its own root disk.
	b.WriteString("22 1 0:21 / /proc rw,relatime - proc proc rw\n23 1 0:22 / /sys rw - sysfs sysfs rw\n24 1 0:23 / /run rw - tmpfs tmpfs rw\n")
	b.WriteString("27 1 259:2 / / rw,relatime - ext4 /dev/nvme0n1p2 rw\n")
	for i, m := range mounts {
		fmt.Fprintf(&b, "%d 27 %s %s %s rw,relatime shared:%d - %s %s rw,vers=4.2\n", 100+i, m.dev, m.root, m.path, i+1, m.fstype, m.source)
	}
	b.WriteString("@@uuid\n" + strings.Join(uuids, "\n") + "\n@@end\n")
	return discover.Host{Name: name, Facts: discover.Parse(b.String())}
}

func nfs(path, source string) mnt { return mnt{"0:52", "/", path, "nfs4", source} }

// The NAS is one filesystem at one path on every node: the same type,
// source and directory. A path holding different filesystems, one
// filesystem at different paths, or on some nodes only, is not shared
// and is said, naming the nodes; local disks (the same device name on
// every node) never are; none at all is no root and no note.
func TestSharedMounts(t *testing.T) {
	nvme := mnt{"259:5", "/", "/mnt/nvme", "ext4", "/dev/nvme1n1"}
	for _, c := range []struct {
		name  string
		hosts []discover.Host
		want  []string
		notes []string
	}{
		{"the NAS everywhere", []discover.Host{
			node("h1", nil, nvme, nfs("/mnt/nas", "nas:/export/hf")),
			node("h2", nil, nvme, nfs("/mnt/nas", "nas:/export/hf")),
			node("h3", nil, nfs("/mnt/nas", "nas:/export/hf"), nvme),
		}, []string{"/mnt/nas"}, nil},
		{"same path, different filesystems", []discover.Host{
			node("h1", nil, nfs("/mnt/nas", "nas1:/hf")),
			node("h2", nil, nfs("/mnt/nas", "nas2:/hf")),
		}, nil, []string{"/mnt/nas is not one filesystem on every node (h1 has nas1:/hf (nfs4), h2 has nas2:/hf (nfs4)): not a shared root"}},
		{"different paths", []discover.Host{
			node("h1", nil, nfs("/mnt/nas", "nas:/hf")),
			node("h2", nil, nfs("/nas", "nas:/hf")),
		}, nil, []string{"nas:/hf (nfs4) is mounted at /mnt/nas on h1; at /nas on h2: a shared root is one filesystem at one path on every node"}},
		{"not on every node", []discover.Host{
			node("h1", nil, nfs("/mnt/nas", "nas:/hf")),
			node("h2", nil, nfs("/mnt/nas", "nas:/hf")),
			node("h3", nil),
		}, nil, []string{"nas:/hf (nfs4) is mounted at /mnt/nas on h1, h2, not on h3"}},
		{"none: local disks only", []discover.Host{
			node("h1", nil, nvme), node("h2", nil, nvme),
		}, nil, nil},
		{"one node: its NFS mount, not a bind mount", []discover.Host{
			node("h1", nil, nfs("/mnt/nas", "nas:/hf"), mnt{"259:5", "/srv/x", "/data", "ext4", "/dev/nvme1n1"}),
		}, []string{"/mnt/nas"}, nil},
		{"a bind mount of one directory of one disk (one machine's test fleet)", []discover.Host{
			node("h1", nil, mnt{"254:0", "/tmp/fleet/h1/nvme", "/mnt/nvme", "ext4", "/dev/vda"}, mnt{"254:0", "/tmp/fleet/nas", "/mnt/nas", "ext4", "/dev/vda"}),
			node("h2", nil, mnt{"254:0", "/tmp/fleet/h2/nvme", "/mnt/nvme", "ext4", "/dev/vda"}, mnt{"254:0", "/tmp/fleet/nas", "/mnt/nas", "ext4", "/dev/vda"}),
		}, []string{"/mnt/nas"}, nil},
		{"bind mounts of two disks that share a device name (their UUIDs differ)", []discover.Host{
			node("h1", []string{"aaaa-1111 103 5"}, mnt{"259:5", "/data", "/srv/data", "ext4", "/dev/nvme1n1"}),
			node("h2", []string{"bbbb-2222 103 5"}, mnt{"259:5", "/data", "/srv/data", "ext4", "/dev/nvme1n1"}),
		}, nil, nil},
		{"a mount point with a space, and the NAS mounted over an autofs trigger", []discover.Host{
			node("h1", nil, mnt{"0:40", "/", "/mnt/nas", "autofs", "systemd-1"}, nfs(`/mnt/my\040nas`, "nas:/hf"), nfs("/mnt/nas", "nas:/b")),
			node("h2", nil, nfs(`/mnt/my\040nas`, "nas:/hf"), nfs("/mnt/nas", "nas:/b")),
		}, []string{"/mnt/my nas", "/mnt/nas"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := discover.SharedMounts(c.hosts)
			if strings.Join(s.Paths(), " ") != strings.Join(c.want, " ") {
				t.Errorf("shared %v, want %v (notes %q)", s.Paths(), c.want, s.Notes)
			}
			if len(s.Notes) != len(c.notes) {
				t.Fatalf("notes %q, want %d like %q", s.Notes, len(c.notes), c.notes)
			}
			for i, n := range c.notes {
				if !strings.Contains(s.Notes[i], n) {
					t.Errorf("note %q lacks %q", s.Notes[i], n)
				}
			}
		})
	}
}

// HubDirs reads the hub search: a models--* directory stands for the hub
// holding it, a huggingface/hub directory for itself (a hub with no model
// yet); each once, sorted.
func TestHubDirs(t *testing.T) {
	got := discover.HubDirs("/mnt/nas/huggingface/hub/models--org--a\n/mnt/nas/huggingface/hub\n/mnt/nas/huggingface/hub/models--org--b\n/mnt/nas/old/models--x--y\n\nfind: '/mnt/nas/private': Permission denied\n@@end\n")
	if strings.Join(got, " ") != "/mnt/nas/huggingface/hub /mnt/nas/old" {
		t.Errorf("hubs %v", got)
	}
}

// The staging root is never the NAS: a network filesystem or a read-only
// mount is passed over however much room it has. df -a lists bind mounts
// (the test fleet's /mnt/nvme is a directory of the host's disk bound
// there) and pseudo filesystems, which have no size and are no disks.
func TestRootNeverOnTheNAS(t *testing.T) {
	f := discover.Parse(`@@df
proc 0 0 0 - /proc
/dev/vda 270000000000 1 60000000000 23% /
/dev/vda 270000000000 1 60000000000 23% /mnt/nvme
/dev/vda 270000000000 1 60000000000 23% /mnt/nas
@@mounts
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
50 27 254:0 /fleet/h1/nvme /mnt/nvme rw,relatime - ext4 /dev/vda rw
51 27 254:0 /fleet/nas /mnt/nas ro,relatime - ext4 /dev/vda rw
@@end
`)
	if root, d, ok := f.Root(); !ok || root != "/mnt/nvme/sparklane" || d.Mount != "/mnt/nvme" || len(f.Disks) != 3 {
		t.Errorf("root %q on %+v (disks %+v), want /mnt/nvme/sparklane", root, d, f.Disks)
	}
	f = discover.Parse(`@@df
/dev/sda2 500000000000 1 400000000000 1% /
/dev/sdb1 2000000000000 1 1000000000000 1% /data
nas:/export/hf 90000000000000 1 80000000000000 1% /mnt/nas
@@mounts
27 1 8:2 / / rw,relatime - ext4 /dev/sda2 rw
28 27 8:17 / /data rw,relatime - xfs /dev/sdb1 rw
29 27 0:52 / /mnt/nas rw,relatime - nfs4 nas:/export/hf rw,vers=4.2
@@end
`)
	if root, _, _ := f.Root(); root != "/data/sparklane" {
		t.Errorf("root %q, want /data/sparklane (not the NAS with more room)", root)
	}
}

// A node whose one NVMe is its system disk (a DGX Spark: nvme0n1p2 on /)
// stages under /mnt/nvme/sparklane, a directory on that disk and the path
// the shipped recipes use; a system disk that is not NVMe gets
// /srv/sparklane.
func TestRootOnASystemNVMe(t *testing.T) {
	f := discover.Facts{Disks: []discover.Disk{{Device: "/dev/nvme0n1p2", Mount: "/", Size: 4 << 40, Free: 3 << 40}}}
	if root, _, ok := f.Root(); !ok || root != "/mnt/nvme/sparklane" {
		t.Errorf("root %q, want /mnt/nvme/sparklane on the system NVMe", root)
	}
	f = discover.Facts{Disks: []discover.Disk{{Device: "/dev/sda2", Mount: "/", Size: 1 << 40, Free: 1 << 39}}}
	if root, _, ok := f.Root(); !ok || root != "/srv/sparklane" {
		t.Errorf("root %q, want /srv/sparklane on a system disk that is not NVMe", root)
	}
}
