package contract

import (
	"strings"
	"testing"
)

func TestSplitArgs(t *testing.T) {
	got, err := SplitArgs("a \\\n  --b 'c d' \"e \\\"f\\\" $g\" h\\ i 'j'\"k\"\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a", "--b", "c d", `e "f" $g`, "h i", "jk"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("SplitArgs = %q, want %q", got, want)
	}
	for _, bad := range []string{"a 'b", `a "b`, `a \`} {
		if _, err := SplitArgs(bad); err == nil {
			t.Errorf("SplitArgs(%q) accepted", bad)
		}
	}
	if JoinArgs([]string{"x", "a b", "it's", "--k=v"}) != `x 'a b' it\'s --k=v` {
		t.Errorf("JoinArgs: %s", JoinArgs([]string{"x", "a b", "it's", "--k=v"}))
	}
}

// JoinArgs prints what SplitArgs reads back as the same argv, whatever the
// arguments hold.
func TestJoinArgsRoundTrips(t *testing.T) {
	argv := []string{"serve", "", "a b", "it's", `"q"`, "$(rm -rf /)", "`x`", "a\nb", "\\", "--k=v w", "{model}", "*", "~x", "tab\there", "ünï cödé"}
	back, err := SplitArgs(JoinArgs(argv))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(back, "\x00") != strings.Join(argv, "\x00") {
		t.Fatalf("round trip:\n got %q\nwant %q\n via %s", back, argv, JoinArgs(argv))
	}
}
