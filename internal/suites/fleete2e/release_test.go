package fleete2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/sparklane/sparklane/internal/fleet"
	"github.com/sparklane/sparklane/internal/simimage"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
	"github.com/sparklane/sparklane/internal/testkit/testfleet"
)

// releaseDir is the output of scripts/release: $SPARKLANE_RELEASE_DIR when
// set (.ci/run builds the release once and hands it over), else built here.
func releaseDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("SPARKLANE_RELEASE_DIR"); d != "" {
		return d
	}
	repo, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	start := time.Now()
	out, err := exec.Command(filepath.Join(repo, "scripts", "release"), dir).CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/release %s: %v\n%s", dir, err, out)
	}
	t.Logf("scripts/release in %s:\n%s", time.Since(start).Round(time.Second), out)
	return dir
}

// tarEntries lists a tarball's regular files.
func tarEntries(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(zr)
	var out []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			out = append(out, h.Name)
		}
	}
}

// run runs a program of the unpacked release as an operator would on a
// control host without Go: outside any source tree, with a PATH that has no
// go, and returns its exit code, stdout and stderr.
func runNoGo(t *testing.T, dir string, argv ...string) (int, string, string) {
	t.Helper()
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = dir
	c.Env = append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SPARKLANE_CONFIG=", "SPARKLANE_CONTROL_EXE=", "HOME="+dir)
	var out, errw strings.Builder
	c.Stdout, c.Stderr = &out, &errw
	err := c.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%v: %v", argv, err)
	}
	return c.ProcessState.ExitCode(), out.String(), errw.String()
}

// The release, as a user without Go gets it: scripts/release builds a
// tarball per architecture; the README's commands check the tarballs,
// unpack the amd64 one and run its `starter version`; it runs `fleet install` onto a
// network-namespace host that has no Go (its view of the Go toolchain is an
// empty directory), from a PATH without Go: the starter starts the control
// service from the release's worker, uploads that worker to the node, and
// the node's worker polls through the tunnel. A node whose architecture the
// given release lacks is refused, naming the node and the architecture.
func TestReleaseInstallsOnAHostWithoutGo(t *testing.T) {
	dist := releaseDir(t)
	sums, err := os.ReadFile(filepath.Join(dist, fleet.ReleaseSums))
	if err != nil {
		t.Fatal(err)
	}
	var tarballs = map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		f := strings.Fields(line)
		for _, arch := range []string{"amd64", "arm64"} {
			if len(f) == 2 && strings.HasSuffix(f[1], "-linux-"+arch+".tar.gz") {
				tarballs[arch] = f[1]
			}
		}
	}
	if len(tarballs) != 2 {
		t.Fatalf("%s lists %d tarballs, want amd64 and arm64:\n%s", filepath.Join(dist, fleet.ReleaseSums), len(tarballs), sums)
	}
	if out, err := exec.Command("sh", "-c", "cd "+dist+" && sha256sum -c SHA256SUMS").CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c in %s: %v\n%s", dist, err, out)
	}
	for arch, name := range tarballs {
		top := strings.TrimSuffix(name, ".tar.gz")
		got := tarEntries(t, filepath.Join(dist, name))
		for _, want := range []string{"starter", "worker", "RELEASE", "SHA256SUMS", "README.md", "docs/operations.md", "recipes/sparklane.example.toml",
			"recipes/sim-demo.toml", "engine-sim/engine-sim", "engine-sim/Dockerfile", "engine-sim/README.md",
			"systemd/sparklane-node@.service", "systemd/sparklane-control.service"} {
			if !slices.Contains(got, top+"/"+want) {
				t.Errorf("%s (%s) lacks %s: %v", name, arch, want, got)
			}
		}
	}
	// The arm64 worker, unpacked and checked as fleet install does, is an
	// arm64 program.
	r, err := (&fleet.Releases{Sources: []string{dist}, Cache: t.TempDir()}).Worker("arm64")
	if err != nil {
		t.Fatal(err)
	}
	if e, err := elf.Open(r.Worker()); err != nil || e.Machine != elf.EM_AARCH64 {
		t.Fatalf("arm64 worker %s: %v %v", r.Worker(), err, e)
	}

	// The README's commands, as written, where the tarballs were
	// downloaded: check, unpack, starter version.
	opt := t.TempDir()
	for _, name := range append(slices.Collect(maps.Values(tarballs)), fleet.ReleaseSums) {
		if err := os.Symlink(filepath.Join(dist, name), filepath.Join(opt, name)); err != nil {
			t.Fatal(err)
		}
	}
	cmds := readmeReleaseCommands(t)
	var out, errOut string
	for _, c := range cmds {
		var code int
		code, out, errOut = runNoGo(t, opt, "sh", "-c", c)
		if code != 0 {
			t.Fatalf("README: %s: exit %d\n%s%s", c, code, out, errOut)
		}
	}
	rel := filepath.Join(opt, strings.TrimSuffix(tarballs["amd64"], ".tar.gz"))
	starterBin := filepath.Join(rel, "starter")
	if last := cmds[len(cmds)-1]; !strings.HasPrefix(last, "./"+filepath.Base(rel)+"/starter version") {
		t.Fatalf("the README's last release command is %q, want ./%s/starter version", last, filepath.Base(rel))
	}
	if out, err := exec.Command("sh", "-c", "cd "+rel+" && sha256sum -c --quiet SHA256SUMS").CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c in %s: %v\n%s", rel, err, out)
	}
	if !strings.Contains(out, "sparklane "+r.Version+" (commit "+r.Commit+", go1.") || !strings.Contains(out, "linux/amd64") || !strings.Contains(out, "release: "+rel) {
		t.Fatalf("starter version:\n%s%s", out, errOut)
	}
	t.Logf("starter version: %s", strings.TrimSpace(out))

	tf := testfleet.New(t, testfleet.Options{Name: "flrel", Nodes: 1, Docker: true})
	n := tf.Node(1)
	hideGo(t, tf, n)

	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cfgFile := filepath.Join(dir, "sparklane.toml")
	// The release's own recipes: sim-demo runs on the default cluster
	// and stages from hf_cache_dir under /mnt/nvme/sparklane.
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf("state_dir = %q\nrecipes_dir = %q\nhf_cache_dir = %q\nshared_roots = [%q]\ndefault_cluster = \"one\"\n\n[temporal]\nport = %d\nui_port = -1\n\n"+
		"[[nodes]]\nname = %q\nssh = %q\nknown_hosts = %q\nidentity = %q\naddress = %q\ndocker = %q\nroots = [\"/mnt/nvme\"]\n\n[[clusters]]\nname = \"one\"\nnodes = [%q]\n",
		state, filepath.Join(rel, "recipes"), testfleet.NASPath+"/hub", testfleet.NASPath, sshdtest.FreePort(t), n.Name, n.SSHAddr(), tf.KnownHostsFile(), tf.IdentityFile(), n.IP, "unix://"+testfleet.NodeDockerSocket, n.Name)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if code, out, errOut := runNoGo(t, dir, starterBin, "--config", cfgFile, "control", "stop"); code != 0 {
			t.Errorf("control stop: exit %d\n%s%s", code, out, errOut)
		}
	})

	// Only the arm64 release given: the amd64 node is refused by name.
	code, out, errOut := runNoGo(t, dir, starterBin, "--config", cfgFile, "fleet", "install", "--wait", "0", "--from", filepath.Join(dist, tarballs["arm64"]))
	want := fmt.Sprintf("node %s: find the worker binary: the node is x86_64 (linux/amd64): no sparklane release for linux/amd64 among %s (linux/arm64)", n.Name, filepath.Join(dist, tarballs["arm64"]))
	if code != 1 || !strings.Contains(out+errOut, want) {
		t.Fatalf("install with only arm64: exit %d, want %q\n%s%s", code, want, out, errOut)
	}

	// The release this starter runs from: nothing is built.
	start := time.Now()
	code, out, errOut = runNoGo(t, dir, starterBin, "--config", cfgFile, "--json", "fleet", "install", "--wait", "120s")
	var rows []installRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || code != 0 || len(rows) != 1 {
		t.Fatalf("fleet install: exit %d (%v)\n%s\n%s", code, err, out, errOut)
	}
	row := rows[0]
	wantID, _ := fleet.BuildID(filepath.Join(rel, "worker"))
	if row.Binary != fleet.Uploaded || row.BuildID != wantID || row.Poller == "" || strings.Contains(errOut, "building") {
		t.Fatalf("fleet install from the release: %+v (want build %s)\n%s", row, wantID, errOut)
	}
	t.Logf("fleet install from the release in %s; node %s polled after %s (%s)", time.Since(start).Round(100*time.Millisecond), n.Name, row.PollWait, row.Poller)
	l := fleet.DefaultLayout()
	b, err := tf.SSH(n, l.Binary()+" version")
	if err != nil || !strings.Contains(string(b), "sparklane "+r.Version+" (commit "+r.Commit) {
		t.Fatalf("the node's worker version: %v\n%s", err, b)
	}
	simImageFromTheRelease(t, dir, starterBin, cfgFile, rel, n)
}

// simImageFromTheRelease: `starter image build --sim`, run from the
// release with no Go here or on node n, builds the engine-sim image in n's
// own dockerd from the release's engine-sim (its version label is that
// program's hash) for the shipped sim-demo lane.
func simImageFromTheRelease(t *testing.T, dir, starterBin, cfgFile, rel string, n *testfleet.Node) {
	t.Helper()
	code, out, errOut := runNoGo(t, dir, starterBin, "--config", cfgFile, "image", "build", "--sim")
	if code != 0 || !strings.Contains(out, "built on "+n.Name+": sha256:") || !strings.Contains(errOut, "the release's linux/amd64 engine-sim "+filepath.Join(rel, "engine-sim", "engine-sim")+", sha256 checked") {
		t.Fatalf("image build --sim from the release: exit %d\n%s%s", code, out, errOut)
	}
	bin, err := fleet.BuildID(filepath.Join(rel, "engine-sim", "engine-sim"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dockerclient.NewClientWithOpts(dockerclient.WithHost("unix://"+n.DockerSocket), dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	img, err := c.ImageInspect(context.Background(), "sparklane/engine-sim:latest")
	if err != nil || img.Config == nil || img.Config.Labels[simimage.LabelVersion] != bin[:12] {
		t.Fatalf("%s's dockerd after image build --sim: %v %+v (want the release engine-sim's hash %s)", n.Name, err, img.Config, bin[:12])
	}
	t.Logf("image build --sim from the release:\n%s%s", errOut, out)
}

// readmeReleaseCommands are the commands of the README's block after
// "**Without Go**" (comments cut).
func readmeReleaseCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "**Without Go**")
	if !ok {
		t.Fatal("README.md has no **Without Go** paragraph")
	}
	var cmds []string
	for _, l := range strings.Split(after, "\n") {
		if strings.HasPrefix(l, "    ") {
			c, _, _ := strings.Cut(strings.TrimSpace(l), "  #")
			cmds = append(cmds, strings.TrimSpace(c))
		} else if len(cmds) > 0 && strings.TrimSpace(l) != "" {
			break
		}
	}
	if len(cmds) != 3 {
		t.Fatalf("the README's release block should show sha256sum, tar and starter version; found %q", cmds)
	}
	return cmds
}

// hideGo makes node n a host without Go: an empty directory is mounted
// over the Go toolchain's root in n's mount namespace, and the test asserts
// that no directory of the SSH session's PATH has a go.
func hideGo(t *testing.T, tf *testfleet.Fleet, n *testfleet.Node) {
	t.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	root := strings.TrimSpace(string(goroot))
	empty := t.TempDir()
	if out, err := tf.Exec(n, "mount", "--bind", empty, root); err != nil {
		t.Fatalf("hide %s on %s: %v\n%s", root, n.Name, err, out)
	}
	b, err := tf.SSH(n, `echo "PATH=$PATH"; for d in $(echo "$PATH" | tr : ' '); do if [ -x "$d/go" ]; then echo "FOUND $d/go"; fi; done; command -v go || echo NO-GO; ls -A `+root+` | wc -l`)
	if err != nil || strings.Contains(string(b), "FOUND") || !strings.Contains(string(b), "NO-GO") || !strings.HasSuffix(strings.TrimSpace(string(b)), "\n0") {
		t.Fatalf("node %s still has Go (%s hidden): %v\n%s", n.Name, root, err, b)
	}
	t.Logf("node %s has no Go: %s", n.Name, strings.Split(string(b), "\n")[0])
}
