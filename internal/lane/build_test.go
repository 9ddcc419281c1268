package lane

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
)

// [build] in a TOML recipe reaches the wire recipe; sparkrun's builder
// keys map onto it; a [build] sparklane could not run is refused at
// render, naming the file, the key and the fix.
func TestRecipeBuildIsWiredAndChecked(t *testing.T) {
	dir := t.TempDir()
	base := "runtime = \"vllm\"\nimage = \"eng:1\"\ncommand = \"vllm serve m\"\n"
	p := writeFile(t, dir, "b.toml", base+"\n[build]\ncontext = \"/mnt/nas/engines/e1\"\ndockerfile = \"docker/Dockerfile\"\nargs = { CUDA = \"12.4\" }\nnode = \"dgx2\"\n")
	r := mustRecipe(t, p)
	plan, err := RenderOn(sparkFleet(), r, "pair", nil)
	if err != nil {
		t.Fatal(err)
	}
	w := Wire(r)
	if w.Build == nil || w.Build.Context != "/mnt/nas/engines/e1" || w.Build.Dockerfile != "docker/Dockerfile" || w.Build.Args["CUDA"] != "12.4" {
		t.Fatalf("wired build %+v", w.Build)
	}
	if got := w.BuildFor(*plan, ""); got == nil || got.Node != "dgx2" {
		t.Errorf("build %+v, want it on the recipe's dgx2", got)
	}
	for _, c := range []struct{ build, want string }{
		{"context = \"/srv/e1\"", "[build] context /srv/e1 is under no shared root (/mnt/nas)"},
		{"git = \"https://h/e.git\"", "[build] git https://h/e.git has no ref"},
		{"context = \"/mnt/nas/e1\"\nnode = \"dgx9\"", "[build] node dgx9 is not one of the lane's nodes on cluster pair (dgx1, dgx2)"},
	} {
		p := writeFile(t, dir, "bad.toml", base+"\n[build]\n"+c.build+"\n")
		_, err := RenderOn(sparkFleet(), mustRecipe(t, p), "pair", nil)
		if err == nil || !strings.Contains(err.Error(), p+": "+c.want) {
			t.Errorf("[build] %s: %v, want %q", c.build, err, c.want)
		}
	}
	if _, err := config.LoadRecipe(writeFile(t, dir, "k.toml", base+"\n[build]\ncontxt = \"/mnt/nas/e1\"\n")); err == nil || !strings.Contains(err.Error(), "contxt") {
		t.Errorf("an unknown [build] key: %v", err)
	}

	// sparkrun: builder docker with builder_config and build_args.
	s := writeFile(t, dir, "s.yaml", "recipe_version: \"2\"\nmodel: m\nruntime: vllm\ncontainer: eng:2\ncommand: vllm serve m\nbuilder: docker\nbuilder_config:\n  context: /mnt/nas/engines/e2\n  dockerfile: Dockerfile.spark\nbuild_args:\n  - CUDA=12.8\n")
	sr := mustRecipe(t, s)
	if _, err := RenderOn(sparkFleet(), sr, "pair", nil); err != nil {
		t.Fatal(err)
	}
	if b := Wire(sr).Build; b == nil || b.Context != "/mnt/nas/engines/e2" || b.Dockerfile != "Dockerfile.spark" || b.Args["CUDA"] != "12.8" {
		t.Errorf("sparkrun builder keys mapped to %+v", b)
	}
}
