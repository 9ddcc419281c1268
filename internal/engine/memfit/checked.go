package memfit

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
)

// The fit's arithmetic is on int64 bytes and checked: every value it
// multiplies or adds comes from a file or a flag someone else wrote (a
// Hub config.json, a safetensors header, a recipe), and a product that
// wrapped would turn a lane that cannot fit into a negative need that
// "fits". An overflow is an error naming the value that caused it.

// mul is a × b for non-negative a and b; ok=false when it passes int64.
func mul(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// add is a + b for non-negative a and b; ok=false when it passes int64.
func add(a, b int64) (int64, bool) {
	if a < 0 || b < 0 || a > math.MaxInt64-b {
		return 0, false
	}
	return a + b, true
}

// ceilDiv is ⌈a ÷ b⌉ for a ≥ 0, b ≥ 1, without the a+b-1 that overflows.
func ceilDiv(a, b int64) int64 {
	if a == 0 {
		return 0
	}
	return (a-1)/b + 1
}

// factor is one term of a product the fit multiplies: its value and what
// it is (the flag or the config.json key, with the value as written), so
// an overflow names it.
type factor struct {
	v    int64
	what string
}

// product multiplies fs in order. what names the product ("the KV cache
// of one sequence"); when it passes 2^63-1 the error names the largest
// factor so far (the one a person would have to fix) and lists them.
func product(what string, fs ...factor) (int64, error) {
	p := int64(1)
	for i, f := range fs {
		if f.v < 0 {
			return 0, fmt.Errorf("%s: %s is negative", what, f.what)
		}
		next, ok := mul(p, f.v)
		if !ok {
			terms, culprit := make([]string, i+1), f
			for j, g := range fs[:i+1] {
				terms[j] = fmt.Sprint(g.v)
				if g.v > culprit.v {
					culprit = g
				}
			}
			return 0, fmt.Errorf("%s passes 2^63-1 at %s (%s): no model or engine has a value that large: check it",
				what, culprit.what, strings.Join(terms, " × "))
		}
		p = next
	}
	return p, nil
}
