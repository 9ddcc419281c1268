package gateway

import (
	"encoding/json"
	"testing"
)

// TestModelField: the top-level "model" is found (escaped, spaced, given
// twice: the last) and nothing nested or in a string is taken for it;
// its rewrite leaves the rest of the body byte for byte.
func TestModelField(t *testing.T) {
	for _, tc := range []struct {
		body, want string
		found, bad bool
	}{
		{`{"model":"chat","messages":[]}`, "chat", true, false},
		{` { "messages" : [{"model":"inner","content":"\"model\":\"x\""}] , "model" : "m\u00e9" } `, "mé", true, false},
		{`{"mod\u0065l":"esc"}`, "esc", true, false},
		{`{"model":"a","x":{"model":"b"},"model":"c"}`, "c", true, false},
		{`{"model":42}`, "", false, false},
		{`{"messages":[{"role":"user"}]}`, "", false, false},
		{`{}`, "", false, false},
		{``, "", false, false},
		{`[{"model":"x"}]`, "", false, false},
		{`{"model":"x"`, "", false, true},
		{`{"model":"x",}`, "", false, true},
		{`{"model":"x" "y":1}`, "", false, true},
		{`{"a":[1,2}`, "", false, true},
	} {
		name, s, e, found, err := modelField([]byte(tc.body))
		if name != tc.want || found != tc.found || (err != nil) != tc.bad {
			t.Errorf("%s: %q %v %v, want %q %v bad=%v", tc.body, name, found, err, tc.want, tc.found, tc.bad)
			continue
		}
		if !found {
			continue
		}
		out := rewriteModel([]byte(tc.body), s, e, "org/served \"x\"")
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil || v["model"] != "org/served \"x\"" {
			t.Errorf("%s rewritten: %s (%v)", tc.body, out, err)
		}
		if string(out[:s]) != tc.body[:s] || string(out[len(out)-(len(tc.body)-e):]) != tc.body[e:] {
			t.Errorf("%s rewritten: %s: the rest changed", tc.body, out)
		}
	}
}
