package sim

import (
	"errors"
	"hash/fnv"
	"math/big"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CountTokens is engine-sim's tokenizer: each whitespace-separated word
// counts ceil(runes/4) tokens, at least one. Exported so tools can build
// prompts of a known length (a word of at most four letters is one token).
func CountTokens(s string) int {
	n := 0
	for _, w := range strings.Fields(s) {
		n += (utf8.RuneCountInString(w) + 3) / 4
	}
	return n
}

// pieces splits text into tokens by the same rule as CountTokens, keeping
// the spaces so the pieces concatenate back to the text (with single
// spaces between words).
func pieces(text string) []string {
	var out []string
	for i, w := range strings.Fields(text) {
		rs := []rune(w)
		for j := 0; j < len(rs); j += 4 {
			p := string(rs[j:min(j+4, len(rs))])
			if j == 0 && i > 0 {
				p = " " + p
			}
			out = append(out, p)
		}
	}
	return out
}

var fillerWords = strings.Fields(`the lane runs fast on each node and its rank
read all the byte from disk then wait for peer to join so that all four
can host one big net with care over a link of high rate what gets said here
is only text made up to pace the test and has no real use at all`)

// generate returns the completion tokens for prompt and whether the text
// ended by itself (an answer) rather than at maxTokens.
func generate(prompt string, maxTokens int) (toks []string, stopped bool) {
	if ans, ok := arithmeticAnswer(prompt); ok {
		p := pieces(ans)
		if len(p) <= maxTokens {
			return p, true
		}
		return p[:maxTokens], false
	}
	h := fnv.New32a()
	h.Write([]byte(prompt))
	k := int(h.Sum32() % uint32(len(fillerWords)))
	toks = make([]string, 0, maxTokens)
	for i := 0; i < maxTokens; i++ {
		w := fillerWords[(k+i)%len(fillerWords)]
		if i > 0 {
			w = " " + w
		}
		toks = append(toks, w)
	}
	return toks, false
}

// arithmeticAnswer finds the last integer arithmetic expression in the
// prompt (+ - * / x × and parentheses, e.g. "What is 127*89?") and answers
// "127*89 = 11303".
func arithmeticAnswer(prompt string) (string, bool) {
	runs := exprRuns(prompt)
	for i := len(runs) - 1; i >= 0; i-- {
		toks := runs[i]
		ops := 0
		for j, t := range toks {
			if j > 0 && strings.ContainsAny(t, "+-*/") && len(t) == 1 {
				ops++
			}
		}
		if ops == 0 {
			continue
		}
		p := &parser{toks: toks}
		v, err := p.expr()
		if err != nil || p.i != len(toks) {
			continue
		}
		var res string
		if v.IsInt() {
			res = v.Num().String()
		} else {
			res = strings.TrimRight(strings.TrimRight(v.FloatString(6), "0"), ".")
		}
		return strings.Join(toks, "") + " = " + res, true
	}
	return "", false
}

// exprRuns splits s into maximal runs of arithmetic tokens.
func exprRuns(s string) [][]string {
	s = strings.ReplaceAll(s, "×", "*")
	s = strings.ReplaceAll(s, "−", "-")
	rs := []rune(s)
	var runs [][]string
	var cur []string
	flush := func() {
		// Drop dangling operators/parens at the edges.
		for len(cur) > 0 && strings.Contains("+*/-(", cur[len(cur)-1]) {
			cur = cur[:len(cur)-1]
		}
		if len(cur) > 0 {
			runs = append(runs, cur)
		}
		cur = nil
	}
	nextNonSpace := func(i int) rune {
		for ; i < len(rs); i++ {
			if !unicode.IsSpace(rs[i]) {
				return rs[i]
			}
		}
		return 0
	}
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r >= '0' && r <= '9':
			j := i
			for j < len(rs) && (rs[j] >= '0' && rs[j] <= '9' || rs[j] == ',' && j+3 < len(rs) && isDigits(rs[j+1:j+4])) {
				j++
			}
			// A number glued to letters (e.g. "v4") is not arithmetic.
			if i > 0 && unicode.IsLetter(rs[i-1]) {
				flush()
				i = j - 1
				continue
			}
			cur = append(cur, strings.ReplaceAll(string(rs[i:j]), ",", ""))
			i = j - 1
		case r == '+' || r == '-' || r == '*' || r == '/' || r == '(' || r == ')':
			cur = append(cur, string(r))
		case (r == 'x' || r == 'X') && len(cur) > 0 && isNum(cur[len(cur)-1]) && unicode.IsDigit(nextNonSpace(i+1)) && (i+1 >= len(rs) || !unicode.IsLetter(rs[i+1])):
			cur = append(cur, "*")
		case unicode.IsSpace(r):
		default:
			flush()
		}
	}
	flush()
	return runs
}

func isDigits(rs []rune) bool {
	for _, r := range rs {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func isNum(s string) bool { return s != "" && s[0] >= '0' && s[0] <= '9' }

type parser struct {
	toks []string
	i    int
}

var errSyntax = errors.New("not an expression")

func (p *parser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func (p *parser) expr() (*big.Rat, error) {
	return p.chain(p.term, "+", "-", func(v, w *big.Rat, add bool) (*big.Rat, error) {
		if add {
			return new(big.Rat).Add(v, w), nil
		}
		return new(big.Rat).Sub(v, w), nil
	})
}

func (p *parser) term() (*big.Rat, error) {
	return p.chain(p.factor, "*", "/", func(v, w *big.Rat, mul bool) (*big.Rat, error) {
		if mul {
			return new(big.Rat).Mul(v, w), nil
		}
		if w.Sign() == 0 {
			return nil, errSyntax
		}
		return new(big.Rat).Quo(v, w), nil
	})
}

// chain parses operand (op operand)* left to right, where op is first or
// second, folding each step with apply (told which op it was).
func (p *parser) chain(operand func() (*big.Rat, error), first, second string, apply func(v, w *big.Rat, isFirst bool) (*big.Rat, error)) (*big.Rat, error) {
	v, err := operand()
	if err != nil {
		return nil, err
	}
	for op := p.peek(); op == first || op == second; op = p.peek() {
		p.i++
		w, err := operand()
		if err != nil {
			return nil, err
		}
		if v, err = apply(v, w, op == first); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (p *parser) factor() (*big.Rat, error) {
	t := p.peek()
	switch {
	case t == "-":
		p.i++
		v, err := p.factor()
		if err != nil {
			return nil, err
		}
		return new(big.Rat).Neg(v), nil
	case t == "(":
		p.i++
		v, err := p.expr()
		if err != nil {
			return nil, err
		}
		if p.peek() != ")" {
			return nil, errSyntax
		}
		p.i++
		return v, nil
	case isNum(t):
		p.i++
		v, ok := new(big.Rat).SetString(t)
		if !ok {
			return nil, errSyntax
		}
		return v, nil
	}
	return nil, errSyntax
}
