package ledger

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// A pass over a mirror of thousands of files reads its ledger once, and
// with encoding/json that was a third of a second pass's CPU over 5,000
// small files (reflection, a validation scan, one allocation per string,
// maps grown step by step). decodeFast parses the shape Save writes
// without reflection: every string without an escape is a slice of the
// file's bytes (one allocation for all of them), the maps are sized once.
// Anything else it does not take apart itself (escapes, null fields, keys
// in another case, numbers that are not plain integers, fields it does
// not know) makes it give up, and encoding/json reads the file as before:
// the result is the same for every file either can read.

// decodeFast fills l from b, the bytes of a ledger file, which it keeps
// (the strings of l are slices of them: the caller must not change b).
// It reports false, leaving l in any state, when b is not in the shape it
// reads; the caller then decodes b with encoding/json into a new ledger.
func decodeFast(b []byte, l *Ledger) bool {
	if len(b) == 0 {
		return false
	}
	p := &fastParser{s: unsafe.String(&b[0], len(b))}
	if !p.object(func(key string) bool { return p.topField(l, key) }) {
		return false
	}
	p.space()
	return p.i == len(p.s)
}

// fastParser reads s from i on; ok is false once it met what it does not
// read.
type fastParser struct {
	s string
	i int
}

func (p *fastParser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// consume skips white space and then c, reporting whether c was there.
func (p *fastParser) consume(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object reads {"key": value, ...}, calling field with the parser at each
// value.
func (p *fastParser) object(field func(key string) bool) bool {
	if !p.consume('{') {
		return false
	}
	if p.consume('}') {
		return true
	}
	for {
		key, ok := p.str()
		if !ok || !p.consume(':') || !field(key) {
			return false
		}
		if p.consume('}') {
			return true
		}
		if !p.consume(',') {
			return false
		}
	}
}

// str reads a string without escapes and returns it as a slice of s.
// Escapes, control characters and invalid UTF-8 (which encoding/json
// replaces) are left to encoding/json.
func (p *fastParser) str() (string, bool) {
	if !p.consume('"') {
		return "", false
	}
	start, high := p.i, false
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == '"':
			p.i++
			v := p.s[start : p.i-1]
			return v, !high || utf8.ValidString(v)
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			high = true
		}
		p.i++
	}
	return "", false
}

// null reads the literal null, reporting whether it was there.
func (p *fastParser) null() bool {
	p.space()
	if strings.HasPrefix(p.s[p.i:], "null") {
		p.i += len("null")
		return true
	}
	return false
}

// integer reads a plain decimal integer (a leading minus allowed).
func (p *fastParser) integer() (string, bool) {
	p.space()
	start := p.i
	if p.i < len(p.s) && p.s[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || (p.s[digits] == '0' && p.i > digits+1) {
		return "", false // no digits, or a leading zero JSON does not allow
	}
	if p.i < len(p.s) {
		switch p.s[p.i] {
		case '.', 'e', 'E':
			return "", false // a float: encoding/json decides
		}
	}
	return p.s[start:p.i], true
}

// integerAs reads a plain decimal integer and converts it with parse.
func integerAs[T any](p *fastParser, parse func(string) (T, error)) (T, bool) {
	t, ok := p.integer()
	if !ok {
		var zero T
		return zero, false
	}
	n, err := parse(t)
	return n, err == nil
}

func (p *fastParser) int64() (int64, bool) {
	return integerAs(p, func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) })
}

func (p *fastParser) uint64() (uint64, bool) {
	return integerAs(p, func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) })
}

// int reads an int field.
func (p *fastParser) int() (int, bool) { return integerAs(p, strconv.Atoi) }

// time reads a time as time.Time's own UnmarshalJSON does.
func (p *fastParser) time() (time.Time, bool) {
	p.space()
	start := p.i
	if _, ok := p.str(); !ok {
		return time.Time{}, false
	}
	var t time.Time
	return t, t.UnmarshalJSON([]byte(p.s[start:p.i])) == nil
}

// topField reads the value of the ledger's field key.
func (p *fastParser) topField(l *Ledger, key string) bool {
	var ok bool
	switch key {
	case "version":
		l.Version, ok = p.int()
	case "kind":
		l.Kind, ok = p.str()
	case "updated_at":
		l.UpdatedAt, ok = p.time()
	case "entries":
		if len(l.Entries) == 0 {
			// One entry has one "sampled" key: the map is sized once.
			// (A second "entries" adds to the first, as in encoding/json.)
			l.Entries = make(map[string]Entry, strings.Count(p.s, `"sampled":`))
		}
		ok = p.object(func(k string) bool {
			var e Entry
			if !p.entry(&e) {
				return false
			}
			l.Entries[k] = e
			return true
		})
	case "links":
		if l.Links == nil {
			l.Links = make(map[string]LinkSeal, strings.Count(p.s, `"target":`))
		}
		ok = p.object(func(k string) bool {
			var ls LinkSeal
			if !p.object(func(f string) bool { return p.linkField(&ls, f) }) {
				return false
			}
			l.Links[k] = ls
			return true
		})
	}
	return ok
}

// entry reads one Entry object.
func (p *fastParser) entry(e *Entry) bool {
	return p.object(func(key string) bool {
		var ok bool
		switch key {
		case "size":
			e.Size, ok = p.int64()
		case "sampled":
			e.Sampled, ok = p.str()
		case "sha256":
			e.SHA256, ok = p.str()
		case "source":
			e.Source, ok = p.str()
		case "verified_at":
			e.VerifiedAt, ok = p.time()
		case "seal":
			if p.null() {
				e.Seal, ok = nil, true
				break
			}
			if e.Seal == nil {
				e.Seal = new(Seal) // (a second "seal" adds to the first, as in encoding/json)
			}
			ok = p.object(func(f string) bool { return p.sealField(e.Seal, f) })
		}
		return ok
	})
}

// sealField reads the value of a Seal's field key.
func (p *fastParser) sealField(s *Seal, key string) bool {
	var ok bool
	switch key {
	case "dev":
		s.Dev, ok = p.uint64()
	case "ino":
		s.Ino, ok = p.uint64()
	case "mtime_ns":
		s.MtimeNS, ok = p.int64()
	case "ctime_ns":
		s.CtimeNS, ok = p.int64()
	}
	return ok
}

// linkField reads the value of a LinkSeal's field key.
func (p *fastParser) linkField(ls *LinkSeal, key string) bool {
	if key == "target" {
		var ok bool
		ls.Target, ok = p.str()
		return ok
	}
	return p.sealField(&ls.Seal, key)
}
