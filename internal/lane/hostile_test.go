package lane

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/fault"
)

func TestLaneNamesAreNames(t *testing.T) {
	dir := t.TempDir()
	bad := map[string]string{
		"dots.toml":    `name = "../etc"`,
		"slash.toml":   `name = "a/b"`,
		"space.toml":   `name = "my lane"`,
		"newline.toml": `name = "a\nb"`,
		"dotdot.toml":  `name = "a..b"`,
		"upper.toml":   `name = "Mia"`,
		"alias.toml":   "name = \"fine\"\naliases = [\"ok\", \"mia/..\"]",
	}
	var paths []string
	for f, body := range bad {
		paths = append(paths, writeFile(t, dir, f, body+"\n"+laneHead))
	}
	paths = append(paths, writeFile(t, dir, "My Lane.toml", laneHead))
	got := errText(checkFiles(paths))
	wantLines(t, got,
		filepath.Join(dir, "dots.toml")+`: name: "../etc" is not a lane name`,
		filepath.Join(dir, "slash.toml")+`: name: "a/b" is not a lane name`,
		filepath.Join(dir, "space.toml")+`: name: "my lane" is not a lane name`,
		filepath.Join(dir, "newline.toml")+`: name: "a\nb" is not a lane name`,
		filepath.Join(dir, "dotdot.toml")+`: name: "a..b" is not a lane name`,
		filepath.Join(dir, "upper.toml")+`: name: "Mia" is not a lane name`,
		filepath.Join(dir, "alias.toml")+`: aliases[1]: "mia/.." is not a lane name`,
		filepath.Join(dir, "My Lane.toml")+`: name: "My Lane" is not a lane name`, "(taken from the file name: rename the file or set name)",
	)
	if strings.Contains(got, "aliases[0]") {
		t.Errorf("valid alias refused:\n%s", got)
	}

	// Render never derives a container name from a bad name.
	fleet := &config.Config{File: "fleet.toml", Nodes: []config.Node{{Name: "a"}}, Clusters: []config.Cluster{{Name: "one", Nodes: []string{"a"}}}}
	if _, err := Render(fleet, &config.Recipe{File: "x.toml", Name: "../x", Cluster: "one", Runtime: "sim", Image: "i", Command: "serve"}, nil); err == nil || !strings.Contains(err.Error(), `x.toml: name: "../x" is not a lane name`) {
		t.Fatalf("Render with a path for a name: %v", err)
	}
	for _, lane := range []string{"../x", "a/b", "..", "", "x\ny"} {
		if d, err := LaneDir("/srv/recipes", lane); err == nil {
			t.Errorf("LaneDir accepted %q: %s", lane, d)
		}
	}
	d, err := ReportsDir(&config.Config{RecipesDir: "/srv/recipes"}, "dsv41-flash-4x-mia")
	if err != nil || d != "/srv/recipes/dsv41-flash-4x-mia/reports" {
		t.Fatalf("ReportsDir = %s, %v", d, err)
	}
	if _, err := ReportsDir(&config.Config{RecipesDir: "/srv/recipes"}, "../../etc"); err == nil {
		t.Fatal("ReportsDir let a lane name climb out of recipes_dir")
	}
}

func TestMountSourcesInsideRoots(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "sparklane.toml", hostileFleet)
	rp := writeFile(t, dir, "lane.toml", laneHead+`
[[mounts]]
src = "/etc"
dst = "/host-etc"
[[mounts]]
src = "/nas/models"
dst = "/models"
[[mounts]]
src = "/nvme/cache/{lane}"
dst = "/cache"
[[mounts]]
src = "/dev/infiniband"
dst = "/dev/infiniband"
host = true
[[mounts]]
src = "/tmp/sim/n1/nvme/x"
dst = "/x"
`)
	errs, notices := Check([]string{cfgPath, rp})
	got := errText(errs)
	wantLines(t, got,
		rp+`: mounts[0].src: /etc is outside node n1's roots [/nvme /var/lib/sparklane] and shared_roots [/nas]: bind a path under them, or set host = true`,
	)
	// Render stops at the first bad mount of a node; fix it and the next shows.
	b, _ := os.ReadFile(rp)
	os.WriteFile(rp, []byte(strings.Replace(string(b), `src = "/etc"`, `src = "/nvme/etc"`, 1)), 0o644)
	errs, _ = Check([]string{cfgPath, rp})
	wantLines(t, errText(errs), rp+`: mounts[1].src: /nas/models is on shared root /nas, which containers may only read: set read_only = true`)
	b, _ = os.ReadFile(rp)
	os.WriteFile(rp, []byte(strings.Replace(string(b), "dst = \"/models\"\n", "dst = \"/models\"\nread_only = true\n", 1)), 0o644)
	errs, _ = Check([]string{cfgPath, rp})
	// A path already carrying the fs_root is not inside the roots: the
	// worker would map it again (/tmp/sim/n1/tmp/sim/n1/...).
	wantLines(t, errText(errs), rp+`: mounts[4].src: /tmp/sim/n1/nvme/x is outside node n1's roots`)
	b, _ = os.ReadFile(rp)
	os.WriteFile(rp, []byte(strings.Replace(string(b), `src = "/tmp/sim/n1/nvme/x"`, `src = "/var/lib/sparklane/x"`, 1)), 0o644)
	errs, notices = Check([]string{cfgPath, rp})
	if len(errs) != 0 {
		t.Fatalf("fixed recipe: %v", errs)
	}
	if len(notices) != 1 || notices[0] != rp+": mounts[3]: host mount /dev/infiniband -> /dev/infiniband (host = true: bound from the host, outside the node's roots)" {
		t.Fatalf("notices %q", notices)
	}
	cfg, _ := config.Load(cfgPath)
	r, _ := config.LoadRecipe(rp)
	plan, err := Render(cfg, r, nil)
	if err != nil {
		t.Fatal(err)
	}
	host := 0
	for _, m := range plan.Nodes[0].Mounts {
		if m.Host {
			host++
			if m.Src != "/dev/infiniband" {
				t.Errorf("host mount %+v", m)
			}
		}
	}
	if host != 1 {
		t.Fatalf("rendered plan lost host = true: %+v", plan.Nodes[0].Mounts)
	}
}

func TestHooksClearRules(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "sparklane.toml", hostileFleet)
	rp := writeFile(t, dir, "lane.toml", laneHead+`
[hooks]
clear = ["/nvme", "/nvme/stage", "/nvme/stage/w/receipts", "/nvme/a/../b", "relative", "/etc/x", "/nvme/stage/w", "/var/lib/sparklane/receipts", "/nvme/exports/m"]
[[staging]]
kind = "hub-mirror"
src = "/nas/hub"
dst = "/nvme/stage/w"
repos = ["org/m"]
exports = [{ repo = "org/m", path = "/nvme/exports/m" }]
`)
	got := errText(checkFiles([]string{cfgPath, rp}))
	wantLines(t, got,
		rp+`: hooks.clear[0]: /nvme holds staging[0].dst (/nvme/stage/w)`,
		rp+`: hooks.clear[0]: /nvme is node n1's root itself: clear would empty the whole root`,
		rp+`: hooks.clear[1]: /nvme/stage holds staging[0].dst (/nvme/stage/w): clear would delete the staged data`,
		rp+`: hooks.clear[2]: /nvme/stage/w/receipts is inside staging[0].dst (/nvme/stage/w)`,
		rp+`: hooks.clear[3]: /nvme/a/../b contains ".."`,
		rp+`: hooks.clear[4]: "relative" is not absolute`,
		rp+`: hooks.clear[5]: /etc/x is outside node n1's roots [/nvme /var/lib/sparklane]`,
		rp+`: hooks.clear[6]: /nvme/stage/w is staging[0].dst: clear would delete the staged data`,
		rp+`: hooks.clear[8]: /nvme/exports/m is staging[0].exports[0]`,
	)
	if strings.Contains(got, "hooks.clear[7]") {
		t.Errorf("a clear path of its own inside a root was refused:\n%s", got)
	}

	cfg := mustConfig(t, cfgPath)
	if strings.Join(cfg.Nodes[0].ClearHelper, " ") != "sudo -n" {
		t.Fatalf("clear_helper %q", cfg.Nodes[0].ClearHelper)
	}
	bad := writeFile(t, dir, "bad.toml", strings.Replace(hostileFleet, `clear_helper = ["sudo", "-n"]`, `clear_helper = ["", "-n"]`, 1))
	cfg = mustConfig(t, bad)
	if err := Validate(cfg, nil); err == nil || !strings.Contains(err.Error(), bad+`: nodes[0].clear_helper[0]: empty word`) {
		t.Fatalf("empty clear_helper word: %v", err)
	}
}

func TestValidationGaps(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "sparklane.toml", `
probe_grace = "-1s"
node_outage_budget = "-1h"
[temporal]
ui_port = 70000
[[nodes]]
name = "a"
roots = ["/nvme"]
[[nodes]]
name = "a"
roots = ["/nvme"]
[[clusters]]
name = "c"
nodes = ["a", "a"]
`)
	// -1 (no web UI) is a valid ui_port.
	noUI, err := config.Load(writeFile(t, dir, "noui.toml", "[temporal]\nui_port = -1\n"))
	if err != nil || Validate(noUI, nil) != nil || noUI.Temporal.UIPort != -1 {
		t.Fatalf("ui_port = -1: %v %v", err, Validate(noUI, nil))
	}
	cfg := mustConfig(t, cfgPath)
	wantLines(t, errText(fault.Items(Validate(cfg, nil))),
		cfgPath+`: probe_grace: -1s is negative`,
		cfgPath+`: node_outage_budget: -1h0m0s is negative`,
		cfgPath+`: temporal.ui_port: 70000 is not a port in 1..65535 (or 0: a free port, -1: no web UI)`,
		cfgPath+`: nodes[1].name: node a is defined twice (also nodes[0])`,
		cfgPath+`: clusters[0].nodes[1]: node a is listed twice in cluster c`,
	)

	rp := writeFile(t, dir, "lane.toml", `runtime = "sim"
image = "img"
command = "serve --port {port} {nope} --x {via}"
node_outage_budget = "-2m"
[defaults]
port = 70000
dist_port = 0
via = "{missing}"
[probe]
ready = "-1m"
[hooks]
timeout = "-5s"
[bench]
runs = 300
`)
	// Checked alone (no fleet among the files): the unknown placeholder is
	// caught with the words render uses.
	got := errText(checkFiles([]string{rp}))
	wantLines(t, got,
		rp+`: defaults.port: 70000 is not a port in 1..65535`,
		rp+`: defaults.dist_port: 0 is not a port in 1..65535`,
		rp+`: probe.ready: -1m is negative`,
		rp+`: node_outage_budget: -2m is negative`,
		rp+`: hooks.timeout: -5s is negative`,
		rp+`: bench.runs: 300 is out of range: write how many times the sweep repeats, 1..50 (0 or absent: 3)`,
		rp+`: command: unknown placeholder {nope}: add nope under [defaults] or pass -o nope=VALUE`,
		rp+`: command: unknown placeholder {missing}: add missing under [defaults] or pass -o missing=VALUE`,
	)
	// The same recipe, valid otherwise, fails render with the same line.
	ok := writeFile(t, dir, "ok.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"serve {nope}\"\ncluster = \"c1\"\n")
	one := writeFile(t, dir, "one.toml", "[[nodes]]\nname = \"a\"\n[[clusters]]\nname = \"c1\"\nnodes = [\"a\"]\n")
	oneCfg := mustConfig(t, one)
	r := mustRecipe(t, ok)
	_, rerr := Render(oneCfg, r, nil)
	checkErrs := checkFiles([]string{ok})
	if rerr == nil || len(checkErrs) != 1 || checkErrs[0].Error() != rerr.Error() {
		t.Fatalf("check and render differ:\n check: %v\nrender: %v", checkErrs, rerr)
	}
}
