package memfit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxLenAuto is what ParseMaxModelLen returns for "auto" and "-1": vLLM
// then fits the context to the memory left, so no KV cache floor can be
// counted.
const MaxLenAuto int64 = -1

// ParseMaxModelLen reads a max_model_len exactly as vLLM's --max-model-len
// does (human_readable_int_or_auto in vllm/utils/argparse_utils.py), so
// the fit counts the context the engine will serve. It is the one parser
// of max_model_len: the memory fit reads the rendered flag with it, recipe
// checks read [defaults] max_model_len and -o max_model_len with it, and
// engine-sim reads its --max-model-len with it.
//
//   - "auto" (any case) or "-1": MaxLenAuto;
//   - a number and one unit letter: lowercase k, m, g, t are powers of
//     1000 and take decimals ("25.6k" = 25600; the decimal is multiplied
//     in binary floating point and truncated, as vLLM does, so "1.2345k"
//     is 1234 and "8.2m" is 8199999); uppercase K, M, G, T are powers of
//     1024 and take whole numbers only ("32K" = 32768; vLLM refuses
//     "1.5M");
//   - else a plain integer as Python's int() reads it: surrounding spaces,
//     a sign, "_" between digits ("32_768").
//
// Digits are ASCII. A result that is not a positive length, or passes
// 2^63-1, is an error; the error does not name the key (callers do).
func ParseMaxModelLen(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "-1" || strings.EqualFold(t, "auto") {
		return MaxLenAuto, nil
	}
	var n int64
	var err error
	if num, unit, ok := unitForm(t); ok {
		n, err = unitValue(num, unit)
	} else {
		n, err = ParsePlainInt(t)
	}
	if err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, fmt.Errorf("%q is not a context length: write a positive number of tokens (32768, 32k, 32K) or auto", s)
	}
	return n, nil
}

// ParsePlainInt reads an integer as Python's int() does (argparse
// type=int: SGLang's --context-length, vLLM's -tp and -pp): surrounding
// spaces, an optional sign, ASCII digits with single "_" between them.
// A value past int64 is an error.
func ParsePlainInt(s string) (int64, error) {
	t := strings.TrimSpace(s)
	body := strings.TrimLeft(t, "+-")
	if len(t)-len(body) > 1 || !digitsWithUnderscores(body) {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(t, "_", ""), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is past the largest integer sparklane counts (2^63-1)", s)
	}
	return n, nil
}

// digitsWithUnderscores says s is ASCII digits, with single underscores
// only between two digits (Python's rule for int("1_000")).
func digitsWithUnderscores(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
		case c == '_' && i > 0 && i < len(s)-1 && s[i-1] != '_' && s[i+1] != '_':
		default:
			return false
		}
	}
	return true
}

// unitForm splits vLLM's NUMBER UNIT form: ASCII digits with at most one
// decimal point inside them, then one of kmgt or KMGT.
func unitForm(t string) (num string, unit byte, ok bool) {
	if len(t) < 2 || !strings.ContainsRune("kmgtKMGT", rune(t[len(t)-1])) {
		return "", 0, false
	}
	num, unit = t[:len(t)-1], t[len(t)-1]
	whole, frac, dot := strings.Cut(num, ".")
	if !asciiDigits(whole) || (dot && !asciiDigits(frac)) {
		return "", 0, false
	}
	return num, unit, true
}

func asciiDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// unitValue is num × the unit: lowercase decimal units through a float
// multiply truncated (vLLM's int(float(number) * mult)), uppercase binary
// units on whole numbers only (vLLM's int(number) * mult), both checked
// against 2^63-1.
func unitValue(num string, unit byte) (int64, error) {
	pos := int64(strings.IndexByte("kmgt", unit|0x20)) + 1 // k=1 … t=4
	if unit >= 'a' {
		f, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", num+string(unit))
		}
		v := math.Trunc(f * math.Pow(1000, float64(pos)))
		if v >= math.MaxInt64 {
			return 0, fmt.Errorf("%q is past the largest length sparklane counts (2^63-1 tokens)", num+string(unit))
		}
		return int64(v), nil
	}
	if strings.Contains(num, ".") {
		return 0, fmt.Errorf("%q: decimals are not allowed with the binary unit %c (1024^%d), as vLLM refuses them: write %s%c for powers of 1000, or a whole number of %c", num+string(unit), unit, pos, num, unit|0x20, unit)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is past the largest length sparklane counts (2^63-1 tokens)", num+string(unit))
	}
	v, ok := mul(n, int64(1)<<(10*pos))
	if !ok {
		return 0, fmt.Errorf("%q is past the largest length sparklane counts (2^63-1 tokens)", num+string(unit))
	}
	return v, nil
}
