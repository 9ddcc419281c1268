package contract

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hostileValues are placeholder values a hostile recipe or -o could give,
// each holding a command that touches mark if it ever runs.
func hostileValues(mark string) []string {
	return []string{
		"x$(touch " + mark + ")",
		"x`touch " + mark + "`",
		"a'b$(touch " + mark + ")'c",
		`a"b$(touch ` + mark + `)"c`,
		`a\"$(touch ` + mark + `)`,
		"a;touch " + mark,
		"a && touch " + mark,
		"a|touch " + mark,
		"a\ntouch " + mark,
		"$(touch " + mark + ")'\"",
		"#c; touch " + mark,
		"~root",
		"*",
		"a b",
		`\`,
		"'",
		`"`,
		"$HOME",
		"${HOME}",
		"x > " + mark,
		"x)",
		"x'",
	}
}

// runSh runs script with the named shell and returns its stdout.
func runSh(t *testing.T, shell, dir, script string) string {
	t.Helper()
	cmd := exec.Command(shell, "-c", script)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("%s -c %q: %v: %s", shell, script, err, ee.Stderr)
		}
		t.Fatalf("%s -c %q: %v", shell, script, err)
	}
	return string(out)
}

func fill(vals map[string]string) func(int, string) (string, bool, error) {
	return func(_ int, k string) (string, bool, error) {
		v, ok := vals[k]
		return v, ok, nil
	}
}

// Every hostile value, wherever a recipe author put {v} — bare, inside
// '...', inside "...", glued to other text, inside $(...) in "..." — comes
// out as one literal word: a real sh (dash) and bash print exactly the
// value and nothing is ever executed.
func TestRenderShellValuesAreOneLiteralWord(t *testing.T) {
	dir := t.TempDir()
	mark := filepath.Join(dir, "pwned")
	templates := map[string]func(v string) string{
		`printf '%s\n' {v}`:                       func(v string) string { return v },
		`printf '%s\n' '{v}'`:                     func(v string) string { return v },
		`printf '%s\n' "{v}"`:                     func(v string) string { return v },
		`printf '%s\n' pre{v}post`:                func(v string) string { return "pre" + v + "post" },
		`printf '%s\n' 'pre {v} post'`:            func(v string) string { return "pre " + v + " post" },
		`printf '%s\n' "pre {v} post"`:            func(v string) string { return "pre " + v + " post" },
		`printf '%s\n' "$(printf '%s' {v})"`:      func(v string) string { return v },
		`printf '%s\n' "$(printf '%s' "{v}")"`:    func(v string) string { return v },
		`printf '%s\n' "$(printf '%s' '<{v}>')"`:  func(v string) string { return "<" + v + ">" },
		`V={v}; printf '%s\n' "$V"`:               func(v string) string { return v },
		`printf '%s\n' {v} # a comment`:           func(v string) string { return v },
		`if true; then printf '%s\n' {v}; fi`:     func(v string) string { return v },
		`printf '%s\n' {v} | cat`:                 func(v string) string { return v },
		`printf '%s\n' "a"{v}'b'`:                 func(v string) string { return "a" + v + "b" },
		`case {v} in *) printf '%s\n' {v};; esac`: func(v string) string { return v },
	}
	for tmpl, want := range templates {
		for _, v := range hostileValues(mark) {
			out, err := RenderShell([]string{tmpl}, fill(map[string]string{"v": v}))
			if err != nil {
				t.Errorf("%s with v=%q: %v", tmpl, v, err)
				continue
			}
			for _, shell := range []string{"sh", "bash"} {
				if got := runSh(t, shell, dir, out[0]); got != want(v)+"\n" {
					t.Errorf("%s: %s with v=%q rendered %s printed %q, want %q", shell, tmpl, v, out[0], got, want(v)+"\n")
				}
			}
			if _, err := os.Stat(mark); err == nil {
				t.Fatalf("%s with v=%q rendered %s ran the value's command", tmpl, v, out[0])
			}
		}
	}
}

// A plain value is spliced as is, so rendered hooks read as written; the
// author's quotes are kept, never doubled; a value with quotes inside the
// author's quotes closes and reopens them around one word.
func TestRenderShellKeepsTheAuthorsText(t *testing.T) {
	cases := []struct{ tmpl, v, want string }{
		{`curl {v}/models`, "http://10.0.0.1:8000/v1", `curl http://10.0.0.1:8000/v1/models`},
		{`echo '{v}'`, "Qwen/Qwen3-8B", `echo 'Qwen/Qwen3-8B'`},
		{`echo '{v}'`, "a b$(x)", `echo 'a b$(x)'`},
		{`echo "{v}"`, "a b;c", `echo "a b;c"`},
		{`echo "{v}"`, "a$(x)", `echo ""a\$\(x\)""`},
		{`echo '{v}'`, "it's", `echo ''it\'s''`},
		{`echo {v}`, "a b", `echo 'a b'`},
		{`echo {v} x`, "#c", `echo \#c x`},
		{`echo {v} x`, "", `echo  x`},
		{`echo '{v}' x`, "", `echo '' x`},
		{`echo a{v}b "{v}"`, "", `echo ab ""`},
		{`echo ${HOME} \{v} {w}`, "a b", `echo ${HOME} \{v} {w}`},
	}
	for _, c := range cases {
		out, err := RenderShell([]string{c.tmpl}, fill(map[string]string{"v": c.v}))
		if err != nil || out[0] != c.want {
			t.Errorf("%s with v=%q: %q, %v; want %q", c.tmpl, c.v, out, err, c.want)
		}
	}
}

// Where no quoting makes a value one literal word — ${...}, $((...)),
// backquotes, a here-document, a comment, $'...', shell text that does not
// parse — a value with shell characters is refused naming the
// placeholder, and a plain one still renders.
func TestRenderShellRefusesWhatItCannotQuote(t *testing.T) {
	for _, tmpl := range []string{
		`echo ${X:-{v}}`,
		`echo $(( {v} + 1 ))`,
		"echo `echo {v}`",
		"cat <<EOF\n{v}\nEOF",
		"echo hi # {v}",
		`echo $'{v}'`,
		`echo "unterminated {v}`,
		`for {v} in a; do :; done`,
	} {
		_, err := RenderShell([]string{"true", tmpl}, fill(map[string]string{"v": "1;touch x"}))
		var pe *ShellPartError
		if err == nil || !errors.As(err, &pe) || pe.Part != 1 || !strings.Contains(err.Error(), "placeholder {v}") {
			t.Errorf("%q with a hostile value: %v", tmpl, err)
		}
		if out, err := RenderShell([]string{tmpl}, fill(map[string]string{"v": "7"})); err != nil || strings.Contains(out[0], "{v}") {
			t.Errorf("%q with a plain value: %q, %v", tmpl, out, err)
		}
	}
}

// Parts are one script: a quote left open by one part is open in the
// next, so a value there is not taken for bare.
func TestRenderShellPartsAreOneScript(t *testing.T) {
	_, err := RenderShell([]string{"echo 'a", "{v}'"}, fill(map[string]string{"v": "x'; touch y; '"}))
	if err != nil {
		t.Fatal(err)
	}
	out, err := RenderShell([]string{"echo 'a", "{v}'"}, fill(map[string]string{"v": "x y"}))
	if err != nil || out[1] != "x y'" {
		t.Fatalf("%q, %v", out, err)
	}
}

// An argument starting with '#' is quoted, so a shell reads it as an
// argument and not as the start of a comment.
func TestJoinArgsNeverStartsAComment(t *testing.T) {
	argv := []string{"printf", "%s\\n", "#not-a-comment", "x"}
	if got := runSh(t, "sh", t.TempDir(), JoinArgs(argv)); got != "#not-a-comment\nx\n" {
		t.Fatalf("sh -c %s printed %q", JoinArgs(argv), got)
	}
}
