package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func writeConfigTestFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runStarter(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errw bytes.Buffer
	code := Execute(context.Background(), args, strings.NewReader(""), &out, &errw, nil)
	return code, out.String(), errw.String()
}

const cliFleet = `recipes_dir = "lanes"
[[nodes]]
name = "a"
roots = ["/nvme"]
[[clusters]]
name = "one"
nodes = ["a"]
`

// simLane is a recipe of the sim runtime on cliFleet's cluster that
// serves with command.
func simLane(command string) string {
	return "runtime = \"sim\"\nimage = \"i\"\ncommand = \"" + command + "\"\ncluster = \"one\"\n"
}

// writeCLIFleet writes cliFleet to a new directory with one recipe, file
// name, in its recipes_dir, and returns the config file and recipes_dir.
func writeCLIFleet(t *testing.T, name, recipe string) (cfg, lanes string) {
	t.Helper()
	dir := t.TempDir()
	lanes = filepath.Join(dir, "lanes")
	writeConfigTestFile(t, lanes, name, recipe)
	return writeConfigTestFile(t, dir, "sparklane.toml", cliFleet), lanes
}

// --config (bound to viper with BindPFlag) beats $SPARKLANE_CONFIG, which
// beats ./sparklane.toml; SPARKLANE_RECIPES_DIR beats the file's key.
func TestStarterConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	lane := simLane("serve")
	flagCfg := writeConfigTestFile(t, filepath.Join(dir, "f"), "fleet.toml", cliFleet)
	writeConfigTestFile(t, filepath.Join(dir, "f", "lanes"), "from-flag.toml", lane)
	envCfg := writeConfigTestFile(t, filepath.Join(dir, "e"), "fleet.toml", cliFleet)
	writeConfigTestFile(t, filepath.Join(dir, "e", "lanes"), "from-env.toml", lane)
	writeConfigTestFile(t, filepath.Join(dir, "x"), "from-env-dir.toml", lane)
	t.Setenv("SPARKLANE_CONFIG", envCfg)

	code, out, errOut := runStarter(t, "--config", flagCfg, "lanes")
	if code != 0 || !strings.Contains(out, "from-flag") || strings.Contains(out, "from-env") {
		t.Fatalf("--config: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runStarter(t, "lanes")
	if code != 0 || !strings.Contains(out, "from-env") {
		t.Fatalf("$SPARKLANE_CONFIG: exit %d\n%s%s", code, out, errOut)
	}
	t.Setenv("SPARKLANE_RECIPES_DIR", filepath.Join(dir, "x"))
	code, out, errOut = runStarter(t, "lanes")
	if code != 0 || !strings.Contains(out, "from-env-dir") || strings.Contains(out, "from-env ") {
		t.Fatalf("$SPARKLANE_RECIPES_DIR: exit %d\n%s%s", code, out, errOut)
	}
}

// lanes warns about (and never opens) a FIFO in recipes_dir; recipe check
// prints host mounts as notices.
func TestStarterWarningsAndNotices(t *testing.T) {
	cfg, lanes := writeCLIFleet(t, "ok.toml", simLane("serve"))
	if err := syscall.Mkfifo(filepath.Join(lanes, "stuck.toml"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runStarter(t, "--config", cfg, "lanes")
	if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(errOut, "warning: "+filepath.Join(lanes, "stuck.toml")+": not a regular file (named pipe): skipped") {
		t.Fatalf("lanes with a FIFO: exit %d\n%s%s", code, out, errOut)
	}

	host := writeConfigTestFile(t, lanes, "host.toml", simLane("serve")+"[[mounts]]\nsrc = \"/dev/infiniband\"\ndst = \"/dev/infiniband\"\nhost = true\n")
	code, out, errOut = runStarter(t, "recipe", "check", cfg, host)
	if code != 0 || !strings.Contains(out, "notice: "+host+": mounts[0]: host mount /dev/infiniband -> /dev/infiniband") || !strings.Contains(out, "2 recipe file(s) ok") {
		t.Fatalf("recipe check with a host mount: exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runStarter(t, "--json", "recipe", "check", cfg, host)
	if code != 0 || !strings.Contains(out, `"notices"`) || !strings.Contains(out, "host mount /dev/infiniband") {
		t.Fatalf("recipe check --json: exit %d\n%s", code, out)
	}
}

// A config as `starter init` wrote it before it wrote the port (ssh =
// "user@host") is read by lanes and recipe check as fleet install and
// status read it — port 22 — and each says how to write it instead of
// refusing the file.
func TestSSHWithoutPortIsReadAlikeByEveryCommand(t *testing.T) {
	dir := t.TempDir()
	writeConfigTestFile(t, filepath.Join(dir, "lanes"), "ok.toml", simLane("serve"))
	cfg := writeConfigTestFile(t, dir, "sparklane.toml", strings.Replace(cliFleet, "name = \"a\"\n", "name = \"a\"\nssh = \"root@10.0.0.11\"\n", 1))
	note := `nodes[0].ssh: "root@10.0.0.11" has no port: read as "root@10.0.0.11:22"`
	code, out, errOut := runStarter(t, "--config", cfg, "lanes")
	if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(errOut, "note: "+cfg+": "+note) {
		t.Fatalf("lanes: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runStarter(t, "recipe", "check", cfg)
	if code != 0 || !strings.Contains(out, "notice: "+cfg+": "+note) || !strings.Contains(out, "1 recipe file(s) ok") {
		t.Fatalf("recipe check: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runStarter(t, "--config", cfg, "recipe", "render", "--lane", "ok")
	if code != 0 || strings.Contains(out+errOut, "is not user@host:port") {
		t.Fatalf("recipe render: exit %d\n%s%s", code, out, errOut)
	}
}
