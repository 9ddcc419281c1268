package hubfetch

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/testkit/hubtest"
)

// mountTmpfs mounts a tmpfs of size bytes for the test (as root; a
// failure to mount fails the test, it never skips).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s (the test needs root): %v", size, dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func TestNASFullRefusedBeforeWriting(t *testing.T) {
	want := fixture()
	s, _ := serve(t, want)
	mnt := mountTmpfs(t, 4<<20)
	cache := filepath.Join(mnt, "hub")
	_, err := fetch(t, request(s, cache))
	need := uniqueBytes(want)
	mustType(t, err, NASFull, cache, testRepo, strconv.FormatInt(need, 10)+" bytes", "free")
	if ents, _ := os.ReadDir(mnt); len(ents) != 0 {
		t.Fatalf("a refused fetch wrote %v", ents)
	}
	if s.TotalServed() != 0 {
		t.Fatalf("a refused fetch downloaded %d bytes", s.TotalServed())
	}
}

// TestNASFullWhileWriting: the disk fills up mid-download (another writer
// takes the space after the check): NASFull naming the path; once space
// is freed the next fetch resumes and completes.
func TestNASFullWhileWriting(t *testing.T) {
	want := fixture()
	s, sha := serve(t, want)
	mnt := mountTmpfs(t, 40<<20)
	cache := filepath.Join(mnt, "hub")
	filler := filepath.Join(mnt, "filler")
	var once sync.Once
	req := request(s, cache)
	req.Progress = func(Progress) {
		once.Do(func() {
			f, err := os.Create(filler)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			buf := make([]byte, 1<<20)
			for {
				if _, err := f.Write(buf); err != nil {
					return // full
				}
			}
		})
	}
	first, err := fetch(t, req)
	mustType(t, err, NASFull, filepath.Join(cache, "models--acme--tiny-llm", "blobs"), "no space left")
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	req.Progress = nil
	res, err := fetch(t, req)
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "main", want)
	// What the first call wrote is kept: no byte is downloaded twice. (Not
	// "exactly once": a write refused with ENOSPC may still have extended
	// the file, and those bytes count as resumed.)
	if first.DownloadedFiles == 0 || first.DownloadedBytes+res.DownloadedBytes > uniqueBytes(want) {
		t.Fatalf("first call %+v, second %+v: a byte was downloaded twice (%d in all)", first, res, uniqueBytes(want))
	}
}

// TestNASReadOnly: a read-only cache dir is refused naming the path,
// unless the snapshot is complete there already (nothing to write).
func TestNASReadOnly(t *testing.T) {
	want := map[string][]byte{"config.json": []byte("{}"), "w.bin": randBytes(3, 2<<20)}
	s, sha := serve(t, want)
	mnt := mountTmpfs(t, 16<<20)
	cache := filepath.Join(mnt, "hub")
	if _, err := fetch(t, request(s, cache)); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	res, err := fetch(t, request(s, cache))
	if err != nil || res.DownloadedBytes != 0 {
		t.Fatalf("complete snapshot on a read-only cache: %+v %v", res, err)
	}
	checkTree(t, cache, sha, "main", want)

	s.AddRepo(hubtest.Repo{ID: testRepo, Files: files(map[string][]byte{"config.json": []byte(`{"v": 2}`)})})
	_, err = fetch(t, request(s, cache))
	mustType(t, err, NASReadOnly, cache, "read-only")
	if s.TotalServed() != int64(len(want["w.bin"])+2) {
		t.Fatalf("served %d bytes: the refused fetch downloaded", s.TotalServed())
	}
}

// TestNASPermissionDenied is classified from the errno (a fetch as root
// cannot be refused a write, so the classification is checked directly).
func TestNASPermissionDenied(t *testing.T) {
	err := classifyWrite("/nas/hub/x", &os.PathError{Op: "open", Path: "/nas/hub/x", Err: unix.EACCES})
	mustType(t, err, NASPermissionDenied, "/nas/hub/x")
	if err := classifyWrite("/nas/hub/x", unix.EIO); !errors.Is(err, unix.EIO) {
		t.Fatalf("EIO: %v", err)
	}
}
