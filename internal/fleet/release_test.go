package fleet

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// writeRelease writes the release tarball of arch into dir, laid out as
// scripts/release lays it out (a stand-in worker: these tests only move
// and check bytes), and returns its name. scripts/release itself is run by
// fleete2e's TestReleaseInstallsOnAHostWithoutGo.
func writeRelease(t *testing.T, dir, version, arch string) string {
	t.Helper()
	return writeReleaseWith(t, dir, version, arch, nil)
}

// writeReleaseWith is writeRelease with more files (path → content).
func writeReleaseWith(t *testing.T, dir, version, arch string, more map[string]string) string {
	t.Helper()
	name := "sparklane-" + version + "-linux-" + arch
	files := map[string]string{
		"RELEASE": fmt.Sprintf("version=%s\ncommit=abc123\ngo=go1.26\nos=linux\narch=%s\n", version, arch),
		"worker":  "worker " + version + " " + arch + "\n",
		"starter": "starter " + version + " " + arch + "\n",
	}
	for p, body := range more {
		files[p] = body
	}
	var sums strings.Builder
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(&sums, "%s  %s\n", sha256hex([]byte(files[n])), n)
	}
	files["SHA256SUMS"] = sums.String()
	f, err := os.Create(filepath.Join(dir, name+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for n, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name + "/" + n, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return name + ".tar.gz"
}

// writeSums writes dir's SHA256SUMS of the tarballs names.
func writeSums(t *testing.T, dir string, names ...string) {
	t.Helper()
	var b strings.Builder
	for _, n := range names {
		id, err := BuildID(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s  %s\n", id, n)
	}
	if err := os.WriteFile(filepath.Join(dir, ReleaseSums), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A directory of tarballs gives each architecture its own worker,
// unpacked once under the cache and checked; a second lookup reuses it.
func TestReleasesPickTheWorkerOfEachArchitecture(t *testing.T) {
	dist, cache := t.TempDir(), t.TempDir()
	writeSums(t, dist, writeRelease(t, dist, "1.2.3", "amd64"), writeRelease(t, dist, "1.2.3", "arm64"))
	for _, arch := range []string{"arm64", "amd64", "arm64"} {
		rs := &Releases{Sources: []string{dist}, Cache: cache}
		r, err := rs.Worker(arch)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		b, err := os.ReadFile(r.Worker())
		if err != nil || string(b) != "worker 1.2.3 "+arch+"\n" || r.Arch != arch || r.Version != "1.2.3" || r.Commit != "abc123" {
			t.Fatalf("%s: release %+v, worker %q (%v)", arch, r, b, err)
		}
		if want := filepath.Join(cache, "sparklane-1.2.3-linux-"+arch); r.Dir != want {
			t.Fatalf("%s unpacked into %s, want %s", arch, r.Dir, want)
		}
		// Only what install needs is unpacked.
		if _, err := os.Stat(filepath.Join(r.Dir, "starter")); err == nil {
			t.Fatalf("%s: the starter was unpacked too", arch)
		}
	}
	// An unpacked release directory is a source too.
	rs := &Releases{Sources: []string{filepath.Join(cache, "sparklane-1.2.3-linux-amd64")}, Cache: t.TempDir()}
	if r, err := rs.Worker("amd64"); err != nil || r.Arch != "amd64" {
		t.Fatalf("unpacked directory: %+v, %v", r, err)
	}
}

// A tarball or worker whose sha256 is not the listed one is refused, and
// a missing architecture is named with what the sources hold.
func TestReleasesRefuseAlteredFilesAndNameAMissingArchitecture(t *testing.T) {
	dist := t.TempDir()
	amd := writeRelease(t, dist, "1.2.3", "amd64")
	writeSums(t, dist, amd)

	rs := &Releases{Sources: []string{filepath.Join(dist, amd)}, Cache: t.TempDir()}
	_, err := rs.Worker("arm64")
	if err == nil || !strings.Contains(err.Error(), "no sparklane release for linux/arm64 among "+filepath.Join(dist, amd)+" (linux/amd64)") ||
		!strings.Contains(err.Error(), "sparklane-VERSION-linux-arm64.tar.gz") {
		t.Fatalf("missing arm64: %v", err)
	}
	rs = &Releases{Sources: []string{dist}, Cache: t.TempDir()}
	if _, err := rs.Worker("arm64"); err == nil || !strings.Contains(err.Error(), dist+" (linux/amd64)") {
		t.Fatalf("missing arm64 in a directory: %v", err)
	}

	// The tarball, altered after its sum was written.
	f, err := os.OpenFile(filepath.Join(dist, amd), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("x"))
	f.Close()
	rs = &Releases{Sources: []string{dist}, Cache: t.TempDir()}
	if _, err := rs.Worker("amd64"); err == nil || !strings.Contains(err.Error(), "damaged or altered") {
		t.Fatalf("altered tarball: %v", err)
	}
	// No SHA256SUMS beside the tarball: refused, saying to download it.
	os.Remove(filepath.Join(dist, ReleaseSums))
	if _, err := (&Releases{Sources: []string{filepath.Join(dist, amd)}, Cache: t.TempDir()}).Worker("amd64"); err == nil || !strings.Contains(err.Error(), "download the release's SHA256SUMS too") {
		t.Fatalf("no SHA256SUMS: %v", err)
	}

	// An unpacked release whose worker was altered.
	dist = t.TempDir()
	writeSums(t, dist, writeRelease(t, dist, "1.2.4", "amd64"))
	cache := t.TempDir()
	r, err := (&Releases{Sources: []string{dist}, Cache: cache}).Worker("amd64")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.Worker(), []byte("not the worker\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenRelease(r.Dir); err == nil || !strings.Contains(err.Error(), "damaged or altered") {
		t.Fatalf("altered worker: %v", err)
	}
	// The tarball's copy is unpacked again rather than trusted.
	if r2, err := (&Releases{Sources: []string{dist}, Cache: cache}).Worker("amd64"); err != nil {
		t.Fatalf("unpack again: %v", err)
	} else if b, _ := os.ReadFile(r2.Worker()); string(b) != "worker 1.2.4 amd64\n" {
		t.Fatalf("unpacked again: %q", b)
	}
	if _, err := (&Releases{Sources: []string{filepath.Join(dist, "worker.tgz")}}).Worker("amd64"); err == nil || !strings.Contains(err.Error(), "worker.tgz") {
		t.Fatalf("missing source: %v", err)
	}
}

// The node unit a release ships is fleet install's unit as a systemd
// template: the instance is the node's name.
func TestNodeUnitTemplate(t *testing.T) {
	u := NodeUnitTemplate()
	for _, want := range []string{"ExecStart=/usr/local/lib/sparklane/worker node --node '%i' --config /etc/sparklane/sparklane.toml",
		"EnvironmentFile=-/etc/sparklane/node.env", "systemctl enable --now sparklane-node@NODE", "WantedBy=multi-user.target"} {
		if !strings.Contains(u, want) {
			t.Errorf("unit lacks %q:\n%s", want, u)
		}
	}
	if strings.Contains(u, "Written by") {
		t.Errorf("the shipped unit says a command wrote it:\n%s", u)
	}
}

// engine-sim comes from the release of the node's architecture, checked
// against its sums, with no Go: from a tarball (unpacked once, beside the
// worker) or an unpacked release; a release older than engine-sim says
// so, and a copy an older starter unpacked without it is unpacked again.
func TestReleasesGiveEngineSimOfEachArchitecture(t *testing.T) {
	dist, cache := t.TempDir(), t.TempDir()
	sim := func(arch string) map[string]string {
		return map[string]string{EngineSimPath: "engine-sim " + arch + "\n", "engine-sim/README.md": "# engine-sim\n"}
	}
	writeSums(t, dist, writeReleaseWith(t, dist, "1.3.0", "amd64", sim("amd64")), writeReleaseWith(t, dist, "1.3.0", "arm64", sim("arm64")))
	for _, arch := range []string{"arm64", "amd64"} {
		rs := &Releases{Sources: []string{dist}, Cache: cache}
		p, err := rs.EngineSim(arch)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		if b, err := os.ReadFile(p); err != nil || string(b) != "engine-sim "+arch+"\n" || p != filepath.Join(cache, "sparklane-1.3.0-linux-"+arch, "engine-sim", "engine-sim") {
			t.Fatalf("%s: %s = %q (%v)", arch, p, b, err)
		}
	}
	// An older starter's copy lacks it: unpacked again.
	old := filepath.Join(cache, "sparklane-1.3.0-linux-arm64")
	if err := os.RemoveAll(filepath.Join(old, "engine-sim")); err != nil {
		t.Fatal(err)
	}
	if p, err := (&Releases{Sources: []string{dist}, Cache: cache}).EngineSim("arm64"); err != nil || p != filepath.Join(old, "engine-sim", "engine-sim") {
		t.Fatalf("after an older starter's unpack: %s, %v", p, err)
	}
	// An unpacked release whose engine-sim was altered is refused.
	if err := os.WriteFile(filepath.Join(old, "engine-sim", "engine-sim"), []byte("tampered\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Releases{Sources: []string{old}, Cache: t.TempDir()}).EngineSim("arm64"); err == nil || !strings.Contains(err.Error(), "damaged or altered") {
		t.Fatalf("an altered engine-sim: %v", err)
	}
	// A release made before engine-sim was shipped.
	older := t.TempDir()
	writeSums(t, older, writeRelease(t, older, "1.2.3", "amd64"))
	if _, err := (&Releases{Sources: []string{older}, Cache: t.TempDir()}).EngineSim("amd64"); err == nil || !strings.Contains(err.Error(), "has no engine-sim/engine-sim (a release made before engine-sim was shipped)") {
		t.Fatalf("a release without engine-sim: %v", err)
	}
}
