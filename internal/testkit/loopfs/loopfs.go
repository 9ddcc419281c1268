package loopfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Mount makes a filesystem of sizeMiB MiB and returns its mount point.
func Mount(t *testing.T, sizeMiB int) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	MountAt(t, sizeMiB, mnt)
	return mnt
}

// MountAt mounts a new filesystem of sizeMiB MiB on the existing
// directory mnt (a node's root in a test fleet).
func MountAt(t *testing.T, sizeMiB int, mnt string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("loopfs: a loop-mounted filesystem needs root (losetup, mount); run the test as root")
	}
	img := filepath.Join(t.TempDir(), "fs.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(sizeMiB) << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	run := func(name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("loopfs: %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// -m 0: no reserved blocks, so root's free space is what df shows.
	run("mkfs.ext4", "-q", "-F", "-m", "0", img)
	dev := run("losetup", "--find", "--show", img)
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("loopfs: losetup -d %s: %v\n%s", dev, err, out)
		}
	})
	run("mount", "-t", "ext4", dev, mnt)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("loopfs: umount %s: %v\n%s", mnt, err, out)
		}
	})
}
