package fleet

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// A release is what scripts/release builds: one tarball per architecture,
// sparklane-VERSION-linux-GOARCH.tar.gz, holding the directory of the same
// name with the starter and the worker built for that architecture, the
// example config and recipes, the systemd units, the README and docs, a
// RELEASE manifest and a SHA256SUMS of every file in it; beside the
// tarballs a SHA256SUMS of the tarballs. `fleet install` takes each node's
// worker from the release of the node's architecture, checked against
// those sums before anything is uploaded, and builds nothing.

// Files of a release.
const (
	// ReleaseManifest is the manifest of an unpacked release: KEY=VALUE
	// lines (version, commit, go, os, arch).
	ReleaseManifest = "RELEASE"
	// ReleaseSums lists `SHA256  NAME` lines: in an unpacked release, of
	// its files; beside the tarballs, of the tarballs.
	ReleaseSums = "SHA256SUMS"
)

// releaseTarball is a release tarball's name: its version and GOARCH.
var releaseTarball = regexp.MustCompile(`^sparklane-(.+)-linux-(amd64|arm64)\.tar\.gz$`)

// Release is one unpacked release (a RELEASE manifest's keys).
type Release struct {
	// Dir is the unpacked release directory.
	Dir string `json:"dir"`
	// Version, Commit and GoVersion are what `starter version` prints.
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go"`
	// OS and Arch are the GOOS and GOARCH its programs were built for.
	OS   string `json:"os"`
	Arch string `json:"arch"`
}

// Worker is the release's worker program.
func (r Release) Worker() string { return filepath.Join(r.Dir, "worker") }

// EngineSimPath is where a release keeps engine-sim's static program,
// beside its Dockerfile and README: the build context of the engine-sim
// image (`starter image build --sim`), so no Go is needed to make it.
const EngineSimPath = "engine-sim/engine-sim"

// EngineSim is the release's engine-sim program (a release older than
// EngineSimPath has none).
func (r Release) EngineSim() string { return filepath.Join(r.Dir, filepath.FromSlash(EngineSimPath)) }

// OpenRelease reads the unpacked release at dir: its manifest, and the
// worker's sha256 against the release's SHA256SUMS (a worker that does not
// match is refused: a damaged or altered download).
func OpenRelease(dir string) (Release, error) {
	r := Release{Dir: dir}
	b, err := os.ReadFile(filepath.Join(dir, ReleaseManifest))
	if err != nil {
		return r, fmt.Errorf("%s is not an unpacked sparklane release (%v): pass a sparklane-VERSION-linux-ARCH.tar.gz, its unpacked directory, or the directory holding the tarballs and their %s", dir, err, ReleaseSums)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "version":
			r.Version = v
		case "commit":
			r.Commit = v
		case "go":
			r.GoVersion = v
		case "os":
			r.OS = v
		case "arch":
			r.Arch = v
		}
	}
	if r.Version == "" || r.OS == "" || r.Arch == "" {
		return r, fmt.Errorf("%s: version, os and arch must be set (it has %q): unpack the release tarball again", filepath.Join(dir, ReleaseManifest), strings.TrimSpace(string(b)))
	}
	if _, err := checkSum(filepath.Join(dir, ReleaseSums), "worker", r.Worker()); err != nil {
		return r, err
	}
	return r, nil
}

// readSums reads a SHA256SUMS file: name → sha256 (hex).
func readSums(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok || len(sum) != 64 {
			continue
		}
		out[strings.TrimPrefix(strings.TrimSpace(name), "*")] = strings.ToLower(sum)
	}
	return out, sc.Err()
}

// checkSum checks the file at path against the line for name in the
// SHA256SUMS file sums, and returns its sha256.
func checkSum(sums, name, path string) (string, error) {
	m, err := readSums(sums)
	if err != nil {
		return "", fmt.Errorf("read the checksums of %s: %w: download the release's %s too (scripts/release writes it)", path, err, ReleaseSums)
	}
	want, ok := m[name]
	if !ok {
		return "", fmt.Errorf("%s has no line for %s: it is not the checksum file of this release; download both again", sums, name)
	}
	got, err := BuildID(path)
	if err != nil {
		return "", fmt.Errorf("checksum %s: %w", path, err)
	}
	if got != want {
		return "", fmt.Errorf("%s has sha256 %s, not the %s that %s lists: the file is damaged or altered; download the release again", path, got, want, sums)
	}
	return got, nil
}

// unpackedFrom, in a tarball's unpacked copy, is the tarball's sha256.
const unpackedFrom = ".tarball-sha256"

// Releases finds the worker of each architecture in release sources,
// unpacking a tarball's worker under Cache.
type Releases struct {
	// Sources are, in order of preference: unpacked release directories,
	// release tarballs (with SHA256SUMS beside them), and directories
	// holding tarballs and their SHA256SUMS (scripts/release's output).
	Sources []string
	// Cache is where tarballs are unpacked (STATE_DIR/releases).
	Cache  string
	opened map[string]Release
}

// Worker is the release of goarch among the sources, its worker's sha256
// checked; the error lists what the sources hold and what to add.
func (rs *Releases) Worker(goarch string) (Release, error) {
	if r, ok := rs.opened[goarch]; ok {
		return r, nil
	}
	var have []string
	for _, src := range rs.Sources {
		r, archs, err := rs.find(src, goarch)
		if err != nil {
			return Release{}, err
		}
		if r != nil {
			if rs.opened == nil {
				rs.opened = map[string]Release{}
			}
			rs.opened[goarch] = *r
			return *r, nil
		}
		have = append(have, fmt.Sprintf("%s (%s)", src, orNone(archs)))
	}
	return Release{}, fmt.Errorf("no sparklane release for linux/%s among %s: add sparklane-VERSION-linux-%s.tar.gz and its %s beside them, or pass --from with that tarball", goarch, strings.Join(have, ", "), goarch, ReleaseSums)
}

// EngineSim is the engine-sim program of goarch's release among the
// sources (found as Worker finds the worker), its sha256 checked against
// the release's SHA256SUMS.
func (rs *Releases) EngineSim(goarch string) (string, error) {
	r, err := rs.Worker(goarch)
	if err != nil {
		return "", err
	}
	p := r.EngineSim()
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("release %s (version %s) has no %s (a release made before engine-sim was shipped): use a newer release, or pass --engine-sim PATH", r.Dir, r.Version, EngineSimPath)
	}
	if _, err := checkSum(filepath.Join(r.Dir, ReleaseSums), EngineSimPath, p); err != nil {
		return "", err
	}
	return p, nil
}

func orNone(archs []string) string {
	if len(archs) == 0 {
		return "no release"
	}
	return "linux/" + strings.Join(archs, ", linux/")
}

// find looks for goarch's release in one source, returning the
// architectures it holds when it has none for goarch.
func (rs *Releases) find(src, goarch string) (*Release, []string, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, nil, fmt.Errorf("release %s: %w", src, err)
	}
	if !st.IsDir() {
		m := releaseTarball.FindStringSubmatch(filepath.Base(src))
		if m == nil {
			return nil, nil, fmt.Errorf("release %s: not a sparklane-VERSION-linux-ARCH.tar.gz (amd64 or arm64) that scripts/release builds", src)
		}
		if m[2] != goarch {
			return nil, []string{m[2]}, nil
		}
		r, err := rs.unpack(src)
		return r, nil, err
	}
	if _, err := os.Stat(filepath.Join(src, ReleaseManifest)); err == nil {
		r, err := OpenRelease(src)
		if err != nil {
			return nil, nil, err
		}
		if r.OS != "linux" || r.Arch != goarch {
			return nil, []string{r.Arch}, nil
		}
		return &r, nil, nil
	}
	sums, err := readSums(filepath.Join(src, ReleaseSums))
	if err != nil {
		return nil, nil, fmt.Errorf("release directory %s: %w: it holds neither an unpacked release (%s) nor the tarballs with their %s", src, err, ReleaseManifest, ReleaseSums)
	}
	var archs []string
	for _, name := range slices.Sorted(maps.Keys(sums)) {
		m := releaseTarball.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(src, name)); err != nil {
			continue
		}
		if m[2] == goarch {
			r, err := rs.unpack(filepath.Join(src, name))
			return r, nil, err
		}
		archs = append(archs, m[2])
	}
	return nil, archs, nil
}

// unpack checks tarball against the SHA256SUMS beside it and unpacks its
// manifest, checksums and worker under Cache (once: a later call finds
// them there, the worker checked again).
func (rs *Releases) unpack(tarball string) (*Release, error) {
	base := filepath.Base(tarball)
	name := strings.TrimSuffix(base, ".tar.gz")
	dir := filepath.Join(rs.Cache, name)
	// The unpacked copy is reused only when it came from this very
	// tarball (a rebuilt release may keep its name).
	sum, err := checkSum(filepath.Join(filepath.Dir(tarball), ReleaseSums), base, tarball)
	if err != nil {
		return nil, err
	}
	if b, err := os.ReadFile(filepath.Join(dir, unpackedFrom)); err == nil && strings.TrimSpace(string(b)) == sum && unpackedWhole(dir) {
		if r, err := OpenRelease(dir); err == nil {
			return &r, nil
		}
	}
	if err := os.MkdirAll(rs.Cache, 0o755); err != nil {
		return nil, fmt.Errorf("unpack %s: %w", tarball, err)
	}
	tmp, err := os.MkdirTemp(rs.Cache, "."+name+".")
	if err != nil {
		return nil, fmt.Errorf("unpack %s: %w", tarball, err)
	}
	defer os.RemoveAll(tmp)
	if err := extract(tarball, name, tmp, []string{ReleaseManifest, ReleaseSums, "worker"}, EngineSimPath); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(tmp, filepath.FromSlash(EngineSimPath))); err != nil {
		if err := os.WriteFile(filepath.Join(tmp, noEngineSim), nil, 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, unpackedFrom), []byte(sum+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("unpack %s: %w", tarball, err)
	}
	r, err := OpenRelease(dir)
	if err != nil {
		return nil, fmt.Errorf("unpacked %s: %w", tarball, err)
	}
	return &r, nil
}

// noEngineSim, in a tarball's unpacked copy, says the tarball has no
// engine-sim (an older release): the copy is whole without it.
const noEngineSim = ".no-engine-sim"

// unpackedWhole reports whether an unpacked copy holds what unpack takes
// from a tarball now (a copy made by an older starter lacks engine-sim).
func unpackedWhole(dir string) bool {
	for _, p := range []string{EngineSimPath, noEngineSim} {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p))); err == nil {
			return true
		}
	}
	return false
}

// extract writes the files named want (and those of optional that are
// there), found under top/ in tarball, into dir at their paths.
func extract(tarball, top, dir string, want []string, optional ...string) error {
	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", tarball, err)
	}
	tr := tar.NewReader(zr)
	left := map[string]bool{}
	for _, w := range want {
		left[top+"/"+w] = true
	}
	maybe := map[string]bool{}
	for _, w := range optional {
		maybe[top+"/"+w] = true
	}
	for len(left)+len(maybe) > 0 {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", tarball, err)
		}
		if (!left[h.Name] && !maybe[h.Name]) || h.Typeflag != tar.TypeReg {
			continue
		}
		delete(left, h.Name)
		delete(maybe, h.Name)
		dst := filepath.Join(dir, filepath.FromSlash(strings.TrimPrefix(h.Name, top+"/")))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("unpack %s from %s: %w", h.Name, tarball, err)
		}
	}
	if len(left) > 0 {
		var miss []string
		for k := range left {
			miss = append(miss, k)
		}
		sort.Strings(miss)
		return fmt.Errorf("%s lacks %s: not a tarball scripts/release built", tarball, strings.Join(miss, ", "))
	}
	return nil
}
