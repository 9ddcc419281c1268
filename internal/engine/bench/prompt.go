package bench

import (
	"fmt"
	"strings"
)

// fillerWords are ordinary English words: most tokenizers count each as
// one or two tokens, so character-based sizing after calibration is close.
var fillerWords = strings.Fields(`the river carried small boats past the old mill while children
counted stones along the bank and a baker opened shutters to let warm bread
scent the morning air farmers talked about rain markets prices and the long
road north where a bridge had fallen last winter teachers rang bells clocks
struck seven lanterns dimmed gardens grew quiet letters arrived from distant
towns describing harbors mountains libraries trains festivals and weather`)

// filler returns deterministic text of about n characters for seed: a
// word sequence drawn by a splitmix64 stream, cut at a word boundary.
func filler(seed int64, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	x := uint64(seed)
	for b.Len() < n {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		w := fillerWords[z%uint64(len(fillerWords))]
		if b.Len()+len(w)+1 > n && b.Len() > 0 {
			break
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
	}
	return b.String()
}

// promptBuilder sizes prompts to a token target using the calibration.
// Every prompt starts with a line naming its request number and seed, so
// no two requests share a prefix a prefix cache could reuse.
type promptBuilder struct {
	seed int64
	cal  Calibration
	pool string
}

func (p *promptBuilder) text(tokens int) string {
	if tokens <= 0 {
		return ""
	}
	chars := int(float64(tokens) * p.cal.CharsPerTok)
	if len(p.pool) < chars {
		p.pool = filler(p.seed, chars*2)
	}
	t := p.pool[:chars]
	if i := strings.LastIndexByte(t, ' '); i > 0 {
		t = t[:i]
	}
	return t
}

func (p *promptBuilder) header(req int) string {
	return fmt.Sprintf("Request %d of bench %d.", req, p.seed)
}

// prompt is a pp prompt of about n tokens in total (template included).
func (p *promptBuilder) prompt(req, n int) string {
	h := p.header(req)
	body := n - p.cal.OverheadTokens - int(float64(len(h))/max(p.cal.CharsPerTok, 1)) - 1
	return h + "\n" + p.text(body)
}

// context is a tg prompt whose context is about depth tokens, followed by
// an instruction to keep writing.
func (p *promptBuilder) context(req, depth int) string {
	h := p.header(req)
	const ask = "Continue the text above with a long story."
	if depth <= 0 {
		return h + " Write a long story about a lighthouse keeper."
	}
	body := depth - p.cal.OverheadTokens - int(float64(len(h)+len(ask))/max(p.cal.CharsPerTok, 1)) - 2
	return h + "\n" + p.text(body) + "\n\n" + ask
}
