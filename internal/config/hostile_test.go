package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sparklane/sparklane/internal/strictdecode"
	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

func TestSizeAndKeyLimits(t *testing.T) {
	dir := t.TempDir()
	big := conftest.WriteFile(t, dir, "sparklane.toml", "# "+strings.Repeat("x", strictdecode.MaxFileBytes)+"\n")
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), big+": ") || !strings.Contains(err.Error(), "1 MiB") {
		t.Fatalf("1 MiB config: %v", err)
	}
	bigRecipe := conftest.WriteFile(t, dir, "big.yaml", "# "+strings.Repeat("x", strictdecode.MaxFileBytes)+"\n")
	if _, err := LoadRecipe(bigRecipe); err == nil || !strings.Contains(err.Error(), bigRecipe+": ") || !strings.Contains(err.Error(), "1 MiB") {
		t.Fatalf("1 MiB recipe: %v", err)
	}

	var keys strings.Builder
	for i := 0; i <= strictdecode.MaxFileKeys; i++ {
		fmt.Fprintf(&keys, "K%d = \"v\"\n", i)
	}
	if keys.Len() > strictdecode.MaxFileBytes {
		t.Fatal("test file too big to test the key limit alone")
	}
	manyCfg := conftest.WriteFile(t, dir, "many.toml", "[temporal]\n"+keys.String())
	want := fmt.Sprintf("more than %d keys", strictdecode.MaxFileKeys)
	if _, err := Load(manyCfg); err == nil || !strings.HasPrefix(err.Error(), manyCfg+": "+want) {
		t.Fatalf("config with many keys: %v", err)
	}
	manyLane := conftest.WriteFile(t, dir, "lane.toml", conftest.LaneHead+"[env]\n"+keys.String())
	if _, err := LoadRecipe(manyLane); err == nil || !strings.HasPrefix(err.Error(), manyLane+": "+want) {
		t.Fatalf("recipe with many keys: %v", err)
	}
	var yk strings.Builder
	yk.WriteString("recipe_version: \"2\"\nmodel: m\nenv:\n")
	for i := 0; i <= strictdecode.MaxFileKeys; i++ {
		fmt.Fprintf(&yk, "  K%d: v\n", i)
	}
	manyYAML := conftest.WriteFile(t, dir, "lane.yaml", yk.String())
	if _, err := LoadRecipe(manyYAML); err == nil || !strings.HasPrefix(err.Error(), manyYAML+": "+want) {
		t.Fatalf("sparkrun recipe with many keys: %v", err)
	}
}

func TestRecipesDirSkipsWhatIsNotARecipe(t *testing.T) {
	dir := t.TempDir()
	conftest.WriteFile(t, dir, "ok.toml", "runtime = \"sim\"\nimage = \"i\"\ncommand = \"x\"\n")
	fleet := conftest.WriteFile(t, dir, "fleet.toml", conftest.HostileFleet)
	conftest.WriteFile(t, dir, "other-fleet.toml", conftest.HostileFleet)
	conftest.WriteFile(t, dir, "docker-compose.yml", "services:\n  temporal:\n    image: temporalio/server\n")
	fifo := filepath.Join(dir, "x.toml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.yaml")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Symlink(fifo, filepath.Join(dir, "link.toml")); err != nil {
		t.Fatal(err)
	}
	rs, warnings, err := LoadRecipeDir(dir, fleet)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Name != "ok" {
		t.Fatalf("loaded %v", rs)
	}
	got := strings.Join(warnings, "\n")
	conftest.WantLines(t, got,
		fifo+": not a regular file (named pipe): skipped",
		sock+": not a regular file (socket): skipped",
		filepath.Join(dir, "link.toml")+": not a regular file (named pipe): skipped",
		filepath.Join(dir, "docker-compose.yml")+": not a lane recipe: none of sparkrun's keys",
		filepath.Join(dir, "other-fleet.toml")+": not a lane recipe: it is a fleet config",
	)
	if len(warnings) != 5 || strings.Contains(got, fleet+":") {
		t.Fatalf("warnings (the config in use is skipped silently):\n%s", got)
	}
	// Named directly, a FIFO is refused without blocking.
	if _, err := LoadRecipe(fifo); err == nil || !strings.Contains(err.Error(), fifo+": not a regular file (named pipe)") {
		t.Fatalf("LoadRecipe(fifo): %v", err)
	}
	if _, err := Load(fifo); err == nil || !strings.Contains(err.Error(), fifo+": not a regular file (named pipe)") {
		t.Fatalf("Load(fifo): %v", err)
	}
}

// A recipes_dirs entry is read from inside itself (a clone made by hand is
// someone else's text too), a recipes_dirs entry inside a registry clone
// from inside the clone: a link out is broken naming the link, a link to
// a recipe elsewhere in the same tree loads, and recipes_dir (the
// operator's own directory) still follows links.
func TestRecipeTreesAreReadFromInside(t *testing.T) {
	dir := t.TempDir()
	const recipe = "model: m\nruntime: vllm\ncontainer: i\ncommand: vllm serve m\n"
	clone, hand, own := filepath.Join(dir, "clone"), filepath.Join(dir, "hand"), filepath.Join(dir, "own")
	for _, d := range []string{filepath.Join(dir, "outside"), filepath.Join(clone, "common"), filepath.Join(clone, "recipes"), hand, own} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	outside := conftest.WriteFile(t, filepath.Join(dir, "outside"), "x.yaml", recipe)
	conftest.WriteFile(t, filepath.Join(clone, "common"), "base.yaml", recipe)
	links := map[string]string{
		filepath.Join(clone, "recipes", "shared.yaml"): "../common/base.yaml", // inside the clone, outside recipes_dirs: fine
		filepath.Join(clone, "recipes", "leak.yaml"):   outside,
		filepath.Join(hand, "leak2.yaml"):              "../outside/x.yaml",
		filepath.Join(own, "mine.yaml"):                outside,
	}
	for l, target := range links {
		if err := os.Symlink(target, l); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &Config{RecipesDir: own, RecipesDirs: []string{filepath.Join(clone, "recipes"), hand}, Registries: map[string]string{"ext": clone}}
	set, err := LoadRecipeSet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range set.Recipes {
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "mine,shared" {
		t.Errorf("recipes: %v, want mine (recipes_dir) and shared (a link inside the clone)", names)
	}
	want := map[string]string{
		filepath.Join(clone, "recipes", "leak.yaml"): "which links outside registry ext's clone " + clone,
		filepath.Join(hand, "leak2.yaml"):            "which links outside recipes_dirs entry " + hand,
	}
	for _, b := range set.Broken {
		if w, ok := want[b.File]; !ok || !strings.Contains(b.Error, b.File+": is a symlink to ") || !strings.Contains(b.Error, w) {
			t.Errorf("broken %s: %s", b.File, b.Error)
		}
		delete(want, b.File)
	}
	if len(want) > 0 {
		t.Errorf("not reported broken: %v", want)
	}
}
