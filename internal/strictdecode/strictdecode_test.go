package strictdecode

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/viper"
)

func TestParseSize(t *testing.T) {
	cases := map[string]int64{
		"100G":   100 << 30,
		"55G":    55 << 30,
		"1.5T":   3 << 39,
		"512M":   512 << 20,
		"100GiB": 100 << 30,
		"100GB":  100_000_000_000,
		"4096":   4096,
		"2k":     2048,
	}
	for in, want := range cases {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"lots", "", "1.5", "G", "-5G", "5X"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}

func TestCountTOMLKeys(t *testing.T) {
	// '=' inside strings and comments is not a key.
	if n := countTOMLKeys([]byte("a = \"x = y\" # b = c\nc = '''\nd = e\n'''\n[t]\n"), 100); n != 3 {
		t.Fatalf("countTOMLKeys = %d, want 3 (a, c, [t])", n)
	}
}

// A schema of the shapes the hooks know: a nested table, an array of
// tables, a duration, a size, a string map, a field no file may set.
type item struct {
	Name string `mapstructure:"name"`
	Size int64  `mapstructure:"size" unit:"bytes"`
}

type doc struct {
	Path  string        `mapstructure:"path" toml:"-"`
	Wait  time.Duration `mapstructure:"wait"`
	Inner struct {
		On bool `mapstructure:"on"`
	} `mapstructure:"inner"`
	Items []item            `mapstructure:"items"`
	Env   map[string]string `mapstructure:"env"`
	Count int8              `mapstructure:"count"`
}

func TestDecode(t *testing.T) {
	tree, err := ParseTOML("f.toml", []byte(`
Wait = "5s"
path = "x"
count = 300
env = { A = 1, B = [1] }
[inner]
On = true
[[items]]
name = "a"
size = "1.5G"
[[items]]
nmae = "b"
size = "lots"
wait = "1s"
`))
	if err != nil {
		t.Fatal(err)
	}
	var d doc
	keyErrs, valueErrs := Decode("f.toml", tree, &d)
	got := errText(keyErrs) + "--\n" + errText(valueErrs)
	want := `f.toml: key Wait: write it wait: keys are lower-case (a key in another case would be read as wait without a word)
f.toml: key inner.On: write it inner.on: keys are lower-case (a key in another case would be read as on without a word)
f.toml: unknown key items[1].nmae — did you mean items[1].name?
f.toml: unknown key items[1].wait — did you mean the root key wait? Root keys must come before the first [[table]] header
f.toml: unknown key path — valid keys here: count, env, inner, items, wait
--
f.toml: items[1].size: "lots" is not a size: write it like "100G", "1.5T" or "512M"
f.toml: env.B: expected a string, got an array
f.toml: count: 300 is out of range
`
	if got != want {
		t.Errorf("errors\n got:\n%s\nwant:\n%s", got, want)
	}
	if d.Items[0].Size != 3<<29 || !d.Inner.On || d.Wait != 5*time.Second {
		t.Errorf("decoded %+v", d)
	}
}

func TestDecodeViperReadsEnvStrings(t *testing.T) {
	v := viper.New()
	v.Set("wait", "2m")
	v.Set("count", "7")
	v.Set("items", []any{map[string]any{"name": "a", "size": "1k"}})
	var d doc
	if errs := DecodeViper("f.toml", v, &d, nil); errs != nil || d.Wait != 2*time.Minute || d.Count != 7 || d.Items[0].Size != 1024 {
		t.Fatalf("%v %+v", errs, d)
	}
	v.Set("count", "many")
	v.Set("extra", 1)
	errs := DecodeViper("f.toml", v, &d, func(key string) string {
		if key == "count" {
			return "X_COUNT"
		}
		return ""
	})
	want := "f.toml: count (from $X_COUNT): expected an integer, got string \"many\"\nf.toml: unknown key extra\n"
	if got := errText(errs); got != want {
		t.Fatalf("errors\n got:\n%s\nwant:\n%s", got, want)
	}
}

func TestEnvKeys(t *testing.T) {
	got := EnvKeys(reflect.TypeOf(doc{}))
	want := []string{"wait", "inner.on", "env", "count"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("EnvKeys = %v, want %v", got, want)
	}
}

func TestParseYAML(t *testing.T) {
	d, err := ParseYAML("f.yaml", []byte("a: 1\nb: [2]\n"))
	if err != nil || !reflect.DeepEqual(d, map[string]any{"a": int64(1), "b": []any{int64(2)}}) {
		t.Fatalf("table: %#v %v", d, err)
	}
	if d, err := ParseYAML("f.yaml", []byte("- 1\n")); err != nil || Describe(d) != "an array" {
		t.Fatalf("list: %#v %v", d, err)
	}
	if _, err := ParseYAML("f.yaml", []byte("a: [\n")); err == nil || !strings.HasPrefix(err.Error(), "f.yaml: yaml: ") {
		t.Fatalf("syntax: %v", err)
	}
}

func errText(errs []error) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Error() + "\n")
	}
	return b.String()
}

// ReadFileIn follows a symlink only while it stays inside its root: a
// file linked from inside works, one linked (or under a directory linked)
// to outside, or by an absolute link, is an *OutsideRootError naming the
// link, and the outside file is never read.
func TestReadFileInStaysInsideRoot(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "clone")
	for _, d := range []string{filepath.Join(root, "sub"), filepath.Join(dir, "out")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, body string) {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "a.yaml"), "inside")
	write(filepath.Join(dir, "out", "secret"), "SECRET")
	links := map[string]string{
		"rel.yaml":     "a.yaml",
		"sub/up.yaml":  "../a.yaml",
		"out.yaml":     "../out/secret",
		"abs.yaml":     filepath.Join(dir, "out", "secret"),
		"absin.yaml":   filepath.Join(root, "a.yaml"),
		"outdir":       "../out",
		"dangle.yaml":  "../nowhere",
		"sub/in2.yaml": "../rel.yaml",
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	for _, ok := range []string{"a.yaml", "rel.yaml", "sub/up.yaml", "sub/in2.yaml"} {
		if b, err := ReadFileIn(root, filepath.Join(root, ok), "recipe"); err != nil || string(b) != "inside" {
			t.Errorf("%s: %q, %v", ok, b, err)
		}
	}
	for name, link := range map[string]string{"out.yaml": "out.yaml", "abs.yaml": "abs.yaml", "absin.yaml": "absin.yaml", "outdir/secret": "outdir", "dangle.yaml": "dangle.yaml"} {
		p := filepath.Join(root, name)
		_, err := ReadFileIn(root, p, "recipe")
		var out *OutsideRootError
		if !errors.As(err, &out) || out.Path != p || out.Link != filepath.Join(root, link) || out.Target != links[link] || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: %v (%+v), want an OutsideRootError naming link %s", name, err, out, link)
		}
	}
	if _, err := ReadFileIn(root, filepath.Join(dir, "out", "secret"), "recipe"); err == nil || !strings.Contains(err.Error(), "not inside") {
		t.Errorf("a path outside the root: %v", err)
	}
	if _, err := ReadFileIn(root, filepath.Join(root, "missing.yaml"), "recipe"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}
