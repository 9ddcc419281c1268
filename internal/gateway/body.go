package gateway

import (
	"encoding/json"
	"errors"
)

// errNotJSON is a body that starts as a JSON object but is not one.
var errNotJSON = errors.New("request body is not valid JSON")

// modelField finds the top-level "model" of a JSON object body without
// decoding the rest (a body may be megabytes of messages): its value and
// the byte range [start, end) of its JSON string, for a rewrite. found is
// false when the body is not an object or has no string "model" (the last
// one counts when it is given twice, as JSON decoders read it); err when
// the object is malformed.
func modelField(b []byte) (name string, start, end int, found bool, err error) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return "", 0, 0, false, nil
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return "", 0, 0, false, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return "", 0, 0, false, errNotJSON
		}
		ke, esc := scanString(b, i)
		if ke < 0 {
			return "", 0, 0, false, errNotJSON
		}
		isModel := string(b[i+1:ke-1]) == "model"
		if esc {
			var k string
			isModel = json.Unmarshal(b[i:ke], &k) == nil && k == "model"
		}
		i = skipWS(b, ke)
		if i >= len(b) || b[i] != ':' {
			return "", 0, 0, false, errNotJSON
		}
		vs := skipWS(b, i+1)
		ve := skipValue(b, vs)
		if ve < 0 {
			return "", 0, 0, false, errNotJSON
		}
		if isModel {
			var s string
			found = b[vs] == '"' && json.Unmarshal(b[vs:ve], &s) == nil
			name, start, end = s, vs, ve
		}
		i = skipWS(b, ve)
		switch {
		case i < len(b) && b[i] == ',':
			i = skipWS(b, i+1)
		case i < len(b) && b[i] == '}':
			return name, start, end, found, nil
		default:
			return "", 0, 0, false, errNotJSON
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the index just past the JSON string starting at
// b[i] (a quote) and whether it holds an escape; -1 when unterminated.
func scanString(b []byte, i int) (int, bool) {
	esc := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			esc = true
			j++
		case '"':
			return j + 1, esc
		}
	}
	return -1, esc
}

// skipValue returns the index just past the JSON value at b[i]; -1 when
// it is cut short. Scalars are taken up to the next delimiter (the engine
// checks them).
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		e, _ := scanString(b, i)
		return e
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e, _ := scanString(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// rewriteModel is b with the model string at [start, end) replaced by
// served.
func rewriteModel(b []byte, start, end int, served string) []byte {
	q, _ := json.Marshal(served)
	out := make([]byte, 0, len(b)-(end-start)+len(q))
	out = append(out, b[:start]...)
	out = append(out, q...)
	return append(out, b[end:]...)
}
