package lane

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

// [defaults] max_model_len is checked by the rule the memory fit and vLLM
// read it with (memfit.ParseMaxModelLen), in TOML and sparkrun YAML
// recipes alike: what vLLM takes passes, what it refuses is an error
// naming the file and key.
func TestMaxModelLenDefault(t *testing.T) {
	dir := t.TempDir()
	for i, c := range []struct{ toml, yaml, want string }{
		{`32768`, `32768`, ""},
		{`"32k"`, `32k`, ""},
		{`"25.6k"`, `25.6k`, ""},
		{`"auto"`, `auto`, ""},
		{`"{ctx}"`, `"{ctx}"`, ""},
		{`"1.5M"`, `1.5M`, `defaults.max_model_len: "1.5M": decimals are not allowed with the binary unit M`},
		{`"32kb"`, `32kb`, `defaults.max_model_len: "32kb" is not an integer`},
		{`0`, `0`, `defaults.max_model_len: "0" is not a context length`},
		{`"9007199254740993K"`, `9007199254740993K`, `defaults.max_model_len: "9007199254740993K" is past the largest length`},
	} {
		lane := conftest.WriteFile(t, dir, fmt.Sprintf("l%d.toml", i), conftest.LaneHead+"[defaults]\nmax_model_len = "+c.toml+"\nctx = \"1\"\n")
		yml := conftest.WriteFile(t, dir, fmt.Sprintf("y%d.yaml", i), "recipe_version: \"2\"\nmodel: m\nruntime: vllm\ncontainer: i\ncommand: vllm serve {model}\ndefaults:\n  ctx: 1\n  max_model_len: "+c.yaml+"\n")
		for _, p := range []string{lane, yml} {
			r, err := config.LoadRecipe(p)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			errs := config.RecipeErrors(r)
			if err := maxModelLenErr(r); err != nil {
				errs = append(errs, err)
			}
			got := ""
			for _, e := range errs {
				if strings.Contains(e.Error(), "max_model_len") {
					got = e.Error()
				}
			}
			if (c.want == "" && got != "") || (c.want != "" && !strings.Contains(got, p+": "+c.want)) {
				t.Errorf("%s: max_model_len = %s: errors %v, want %q", p, c.toml, errs, c.want)
			}
		}
	}
}
