package itest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's "Run it on your fleet" commands without init, run as written in a
// copy of the repository root: cp the example config, `lanes`, `cutover
// --lane mia --dry-run`. `./starter` is the starter built once here (the
// release's, or `go run ./starter` in the source tree: the same main). The example's nodes are on 10.0.0.x, so the commands run
// in a fresh network namespace with only loopback: nothing leaves this
// machine. The dry run starts nothing — no control service runs for the
// fresh state_dir, so the nodes show as not checked, saying what was not —
// and still prints every node's plan. A control service started anyway
// (state_dir under a temporary HOME) would be stopped at the end.
func TestReadmeQuickStartRunsAsWritten(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed to run the README's commands without network: %v", err)
	}
	repo, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The commands, taken from the README's own block.
	var cmds []string
	for _, l := range strings.Split(string(readme), "\n") {
		l = strings.TrimSpace(l)
		cmd, _, _ := strings.Cut(l, "  #")
		cmd = strings.TrimSpace(cmd)
		const cp = "cp recipes/sparklane.example.toml sparklane.toml"
		switch {
		case strings.Contains(l, cp):
			// Shown as the alternative to init: "# (or: cp … and edit …)".
			cmds = append(cmds, cp)
		case cmd == "./starter lanes",
			strings.HasPrefix(cmd, "./starter cutover --lane ") && strings.HasSuffix(cmd, "--dry-run"):
			cmds = append(cmds, cmd)
		}
	}
	if len(cmds) != 3 {
		t.Fatalf("the README's quick start should show cp, lanes and cutover --dry-run; found %q", cmds)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "starter")
	// The clone below has no go.mod, so the starter finds the control
	// service's program where an install puts it: the worker beside it.
	for _, pkg := range []string{"starter", "worker"} {
		build := exec.Command("go", "build", "-o", filepath.Join(dir, pkg), "./"+pkg)
		build.Dir = repo
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./%s: %v\n%s", pkg, err, out)
		}
	}
	root := filepath.Join(dir, "clone")
	home := filepath.Join(dir, "home")
	for _, d := range []string{root, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// What a fresh clone has at its root: recipes/ and the compose file.
	if out, err := exec.Command("cp", "-r", filepath.Join(repo, "recipes"), filepath.Join(repo, "docker-compose.temporal.yml"), root).CombinedOutput(); err != nil {
		t.Fatalf("copy the clone: %v\n%s", err, out)
	}
	stop := func() {
		c := exec.Command(bin, "control", "stop")
		c.Dir, c.Env = root, append(os.Environ(), "HOME="+home, "SPARKLANE_CONFIG=", "SPARKLANE_CONTROL_EXE=")
		_ = c.Run()
	}
	t.Cleanup(stop)
	script := "set -u\nip link set lo up\n"
	for i, c := range cmds {
		c = strings.Replace(c, "./starter", `"$STARTER"`, 1)
		script += c + " >out" + string(rune('0'+i)) + " 2>err" + string(rune('0'+i)) + "; echo $? >rc" + string(rune('0'+i)) + "\n"
	}
	script += `"$STARTER" control stop >/dev/null 2>&1` + "\n"
	cmd := exec.Command("unshare", "--net", "sh", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "HOME="+home, "SPARKLANE_CONFIG=", "SPARKLANE_CONTROL_EXE=", "STARTER="+bin)
	var combined bytes.Buffer
	cmd.Stdout, cmd.Stderr = &combined, &combined
	if err := cmd.Run(); err != nil {
		t.Fatalf("unshare --net: %v\n%s", err, combined.String())
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for i, c := range cmds {
		n := string(rune('0' + i))
		if rc := strings.TrimSpace(read("rc" + n)); rc != "0" {
			t.Errorf("%s: exit %s\nstdout:\n%s\nstderr:\n%s", c, rc, read("out"+n), read("err"+n))
		}
	}
	lanes := read("out1")
	for _, want := range []string{"dsv41-flash-4x-mia    mia", "aiden16", "dsv41-flash-exl3-2x", "mimo26-flash-mopd-2x", "mimo26-flash-mopd-4x"} {
		if !strings.Contains(lanes, want) {
			t.Errorf("lanes lacks %q:\n%s", want, lanes)
		}
	}
	if strings.Contains(read("err1"), "services") {
		t.Errorf("lanes read a non-recipe file:\n%s", read("err1"))
	}
	dry := read("out2")
	for _, want := range []string{"DRY RUN — cutover of lane dsv41-flash-4x-mia on cluster 4nodes-switch", "[dgx1] rank 0  not checked", "[dgx4] rank 3", "--node-rank 3", "Nothing is written or started",
		"fleet not probed: no control service runs for state_dir", "node reachability, free space and the lanes running on the nodes were not checked"} {
		if !strings.Contains(dry, want) {
			t.Errorf("cutover --dry-run lacks %q:\n%s", want, dry)
		}
	}
	// Nothing started, nothing built: no control lock, no worker program
	// run, no build announced.
	if errDry := read("err2"); strings.Contains(errDry, "started the control service") || strings.Contains(errDry, "building") {
		t.Errorf("cutover --dry-run started or built something:\n%s", errDry)
	}
	if lock := filepath.Join(home, ".local", "state", "sparklane", "control.lock"); fileExists(lock) {
		t.Errorf("cutover --dry-run started a control service: %s exists", lock)
	}
	t.Logf("%s\n%s\n%s", cmds[1], lanes, cmds[2])
}

// fileExists says path exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
