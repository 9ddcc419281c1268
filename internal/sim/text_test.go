package sim

import (
	"strings"
	"testing"
)

func TestArithmeticAnswers(t *testing.T) {
	cases := []struct{ prompt, want string }{
		{"127*89", "11303"},
		{"What is 127*89?", "11303"},
		{"19+23", "42"},
		{"What is 19 + 23? Answer with a number.", "42"},
		{"Compute 19-23.", "-4"},
		{"what is 12 x 12", "144"},
		{"(2+3)*4 = ?", "20"},
		{"What is 2+3*4?", "14"},
		{"100/4", "25"},
		{"123456789123456789*1000", "123456789123456789000"},
	}
	for _, c := range cases {
		got, ok := arithmeticAnswer(c.prompt)
		if !ok {
			t.Errorf("%q: no arithmetic found", c.prompt)
			continue
		}
		if !strings.HasSuffix(got, "= "+c.want) {
			t.Errorf("%q: answer %q, want it to end in %q", c.prompt, got, "= "+c.want)
		}
	}
	for _, p := range []string{"Tell me a story about DeepSeek v4", "Year 2026", "hello"} {
		if got, ok := arithmeticAnswer(p); ok {
			t.Errorf("%q: found arithmetic %q, want none", p, got)
		}
	}
}

func TestTokenizer(t *testing.T) {
	if n := CountTokens("tok tok tok"); n != 3 {
		t.Errorf("3 short words: %d tokens", n)
	}
	if n := CountTokens("  abcdefghi  x "); n != 4 {
		t.Errorf("9-letter word + 1: %d tokens, want 3+1", n)
	}
	text := "hello wonderful world"
	if got := strings.Join(pieces(text), ""); got != text {
		t.Errorf("pieces do not rebuild the text: %q", got)
	}
	if len(pieces(text)) != CountTokens(text) {
		t.Errorf("pieces %d != CountTokens %d", len(pieces(text)), CountTokens(text))
	}
	a, _ := generate("some prompt", 20)
	b, _ := generate("some prompt", 20)
	if len(a) != 20 || strings.Join(a, "") != strings.Join(b, "") {
		t.Errorf("generation not deterministic or wrong length: %d %q vs %q", len(a), strings.Join(a, ""), strings.Join(b, ""))
	}
	if CountTokens(strings.Join(a, "")) != 20 {
		t.Errorf("generated text of 20 tokens counts %d", CountTokens(strings.Join(a, "")))
	}
}

func TestTileConsistent(t *testing.T) {
	for _, rows := range []int64{8, 9, 10, 11, 384006168} {
		for tp := 1; tp <= 4; tp++ {
			for r := 0; r < tp; r++ {
				f, c, err := tileOf(rows, tp, r)
				if err != nil {
					t.Fatal(err)
				}
				if !tileConsistent(f, c, tp, r) {
					t.Errorf("rows %d tp %d rank %d: tile [%d,+%d) judged inconsistent", rows, tp, r, f, c)
				}
				if r > 0 && tileConsistent(int64(r)*c+int64(r)+1, c, tp, r) {
					t.Errorf("rows %d tp %d rank %d: shifted tile judged consistent", rows, tp, r)
				}
			}
		}
	}
}
