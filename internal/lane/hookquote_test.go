package lane

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/serve"
)

// Issue 52: a placeholder value is data, never shell. Values with shell
// metacharacters come from every source — a TOML recipe's [defaults], -o
// overrides, a registry recipe's model and defaults — and land bare,
// inside the author's '...' and inside "..." of post_commands, post_exec
// and pre_exec. The rendered commands then really run (serve.RunHooks, the
// engine post_commands and before_serve hooks run with: sh -c): each
// prints exactly its literal values, and the marker file the values try
// to create exists nowhere.
func TestHookPlaceholdersNeverRunAsShell(t *testing.T) {
	dir := t.TempDir()
	mark := filepath.Join(dir, "pwned")
	cfg := mustConfig(t, writeFile(t, dir, "sparklane.toml", hostileFleet))
	evil := func(s string) string { return strings.ReplaceAll(s, "MARK", mark) }

	// The recipe: a TOML [defaults] value, and the same key from -o.
	toml := mustRecipe(t, writeFile(t, dir, "served.toml", laneHead+evil(`
post_commands = ["printf '%s\n' {served}", "printf '%s\n' '{served}' \"{served}\" pre{served}post"]
post_exec = ["printf '%s\n' {served} '{served}'"]
[defaults]
served = "x$(touch MARK)`+"`touch MARK`"+`"
`)))
	// A registry recipe: someone else's text, model name included.
	reg := filepath.Join(dir, "reg")
	if err := os.MkdirAll(filepath.Join(reg, "recipes"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(reg, "recipes"), "evil.yaml", evil(`model: "org/m$(touch MARK)"
runtime: vllm
container: img
defaults:
  quoted: "a'b$(touch MARK)'c\"d"
command: vllm serve {model}
pre_exec:
  - printf '%s\n' {model} '{quoted}' > `+filepath.Join(dir, "pre.out")+`
post_exec:
  - printf '%s\n' {model} "{quoted}" {extra} "$(printf '%s' {extra})"
post_commands:
  - printf '%s\n' {model} '{quoted}' "{extra}" {head_ip}
`))
	cfg.Registries = map[string]string{"reg": reg}
	sparkrun, err := config.ResolveRecipeRef(cfg, "@reg/evil")
	if err != nil {
		t.Fatal(err)
	}
	model, quoted, extra := evil("org/m$(touch MARK)"), evil(`a'b$(touch MARK)'c"d`), evil("y;touch MARK #")
	served, override := evil("x$(touch MARK)`touch MARK`"), evil("o'$(touch MARK)")

	cases := []struct {
		name      string
		r         *config.Recipe
		overrides map[string]string
		// post are the lines each post_commands entry prints, exec
		// post_exec's, pre pre_exec's (written to pre.out).
		post, exec [][]string
		pre        []string
	}{
		{"toml defaults", toml, nil,
			[][]string{{served}, {served, served, "pre" + served + "post"}}, [][]string{{served, served}}, nil},
		{"-o override", toml, map[string]string{"served": override},
			[][]string{{override}, {override, override, "pre" + override + "post"}}, [][]string{{override, override}}, nil},
		{"registry recipe", sparkrun, map[string]string{"extra": extra},
			[][]string{{model, quoted, extra, "127.0.0.1"}}, [][]string{{model, quoted, extra, extra}}, []string{model, quoted}},
	}
	for _, c := range cases {
		plan, err := RenderOn(cfg, c.r, "one", c.overrides)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		// What a shell reads: the words of each command are the values.
		for i, cmd := range plan.PostCommands {
			words, err := contract.SplitArgs(cmd)
			if err != nil || strings.Join(words[2:], "\n") != strings.Join(c.post[i], "\n") {
				t.Errorf("%s: post_commands[%d] %s reads as %q, %v; want the words %q", c.name, i, cmd, words, err, c.post[i])
			}
		}
		// And what it does: each runs, printing only its literal values.
		var runs []string
		for _, p := range plan.Nodes[0].PreExec {
			runs = append(runs, p.Run)
		}
		for _, hooks := range []struct {
			key  string
			cmds []string
			want [][]string
		}{{"post_commands", plan.PostCommands, c.post}, {"post_exec", plan.PostExec, c.exec}, {"pre_exec", runs, nil}} {
			res, err := serve.RunHooks(context.Background(), serve.HooksInput{Commands: hooks.cmds, Dir: dir, Label: hooks.key})
			if err != nil {
				t.Fatalf("%s: %s: %v", c.name, hooks.key, err)
			}
			for i, want := range hooks.want {
				if got := res.Outputs[i].Output; got != strings.Join(want, "\n")+"\n" {
					t.Errorf("%s: %s[%d] %s printed %q, want %q", c.name, hooks.key, i, hooks.cmds[i], got, strings.Join(want, "\n")+"\n")
				}
			}
		}
		if c.pre != nil {
			b, err := os.ReadFile(filepath.Join(dir, "pre.out"))
			if err != nil || string(b) != strings.Join(c.pre, "\n")+"\n" {
				t.Errorf("%s: pre_exec %q wrote %q, %v; want %q", c.name, runs, b, err, strings.Join(c.pre, "\n")+"\n")
			}
		}
		if _, err := os.Lstat(mark); err == nil {
			t.Fatalf("%s: a placeholder value ran as shell: %s exists", c.name, mark)
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".toml") && e.Name() != "reg" && e.Name() != "pre.out" {
			t.Errorf("a hook made %s", e.Name())
		}
	}
}

// Where quoting cannot make a value one word (inside ${...} of a hook),
// the render fails naming the file, the hook and the placeholder; with a
// plain value the same hook renders.
func TestHookPlaceholderInsideParamExpansionIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := mustConfig(t, writeFile(t, dir, "sparklane.toml", hostileFleet))
	p := writeFile(t, dir, "lane.toml", laneHead+`
post_commands = ["true", "echo ${X:-{served}}"]
[defaults]
served = "ok"
`)
	r := mustRecipe(t, p)
	if _, err := Render(cfg, r, map[string]string{"served": "a;b"}); err == nil ||
		!strings.Contains(err.Error(), p+": post_commands[1]: placeholder {served}") || !strings.Contains(err.Error(), "${...}") {
		t.Fatalf("a value with ; inside ${...}: %v", err)
	}
	plan, err := Render(cfg, r, nil)
	if err != nil || plan.PostCommands[1] != "echo ${X:-ok}" {
		t.Fatalf("a plain value: %v, %v", plan, err)
	}
}
