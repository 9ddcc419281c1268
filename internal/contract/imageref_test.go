package contract

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func imageErrType(err error) string {
	var ie *ImageError
	if errors.As(err, &ie) {
		return ie.Type
	}
	return ""
}

func TestParseImageRef(t *testing.T) {
	d := "sha256:" + strings.Repeat("0", 64)
	for _, tc := range []struct{ in, name, repo, dig string }{
		{"a/b:1", "a/b:1", "a/b", ""},
		{"reg:5000/a/b", "reg:5000/a/b", "reg:5000/a/b", ""},
		{"reg:5000/a/b:t@" + d, "reg:5000/a/b:t", "reg:5000/a/b", d},
		{"a/b@" + d, "", "a/b", d},
	} {
		r, err := ParseImageRef(tc.in)
		if err != nil || r.Name != tc.name || r.Repo != tc.repo || r.Digest != tc.dig || r.String() != tc.in {
			t.Errorf("ParseImageRef(%q) = %+v, %v", tc.in, r, err)
		}
	}
	for _, bad := range []string{"", "a@sha256:xyz", "a@sha256:" + strings.Repeat("0", 65), "a@md5:" + strings.Repeat("0", 64)} {
		if _, err := ParseImageRef(bad); err == nil {
			t.Errorf("ParseImageRef(%q) accepted", bad)
		}
	}
}

func TestPlanImage(t *testing.T) {
	ref := MustImageRef("x:1")
	layers := []string{"sha256:a", "sha256:b", "sha256:c"}
	p, err := PlanImage(ref, []ImageInventory{
		{Node: "h1", HaveLayers: 2},
		{Node: "h2", Present: true, ID: "sha256:i", DiffIDs: layers},
		{Node: "h3", HaveLayers: 1},
		{Node: "h4", Present: true, ID: "sha256:i", DiffIDs: layers},
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.Chain, ",") != "h2,h1,h3" || p.From != 1 || p.Source() != "h2" || strings.Join(p.Present, ",") != "h2,h4" {
		t.Fatalf("plan %+v", p)
	}
	hops := p.Hops()
	if hops[0] != (ImageHop{Node: "h2", Downstream: "h1"}) || hops[1] != (ImageHop{Node: "h1", Upstream: "h2", Downstream: "h3"}) || hops[2] != (ImageHop{Node: "h3", Upstream: "h1"}) {
		t.Fatalf("hops %+v", hops)
	}
	// Everyone has it: nothing moves.
	p, err = PlanImage(ref, []ImageInventory{{Node: "h1", Present: true, ID: "sha256:i", DiffIDs: layers}})
	if err != nil || len(p.Chain) != 0 {
		t.Fatalf("plan %+v, %v", p, err)
	}
	// Nobody has it: ImageMissing naming the nodes and the ways.
	_, err = PlanImage(ref, []ImageInventory{{Node: "h1"}, {Node: "h2"}})
	if typ := imageErrType(err); typ != ImageMissing || !strings.Contains(err.Error(), "h1, h2") || !strings.Contains(err.Error(), "build") {
		t.Fatalf("err %v", err)
	}
	// Two IDs: refused, naming both nodes.
	_, err = PlanImage(ref, []ImageInventory{{Node: "h1", Present: true, ID: "sha256:i"}, {Node: "h2", Present: true, ID: "sha256:j"}})
	if typ := imageErrType(err); typ != DigestMismatch || !strings.Contains(err.Error(), "h1 has sha256:i, h2 has sha256:j") {
		t.Fatalf("err %v", err)
	}
}

// An ImageRef travels as the string the recipe wrote: histories recorded
// when the plan carried a string decode into it, and encode back alike.
func TestImageRefJSONIsItsString(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	for _, s := range []string{"a/b:1", "reg:5000/a/b:t@" + d, "a/b@" + d, ""} {
		var r ImageRef
		if err := json.Unmarshal([]byte(`"`+s+`"`), &r); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		b, err := json.Marshal(r)
		if err != nil || string(b) != `"`+s+`"` {
			t.Fatalf("%q encodes as %s, %v", s, b, err)
		}
	}
	var r ImageRef
	if err := json.Unmarshal([]byte(`"a@sha256:xyz"`), &r); err == nil {
		t.Fatal("a bad reference decoded")
	}
}

// A digest given in part (a log's first digits) parses, marked
// Incomplete, so the lane renders; Pinned refuses it for a run, saying how
// many digits it has.
func TestIncompletePinParsesAndIsRefusedForARun(t *testing.T) {
	r, err := ParseImageRef("lmsysorg/sglang:dev@sha256:3dbc3130")
	if err != nil || !r.Incomplete() || r.String() != "lmsysorg/sglang:dev@sha256:3dbc3130" {
		t.Fatalf("%+v, %v", r, err)
	}
	if err := r.Pinned(); err == nil || !strings.Contains(err.Error(), "has 8 of 64 hex digits") {
		t.Fatalf("Pinned: %v", err)
	}
	whole := MustImageRef("a:1@sha256:" + strings.Repeat("ab", 32))
	if whole.Incomplete() || whole.Pinned() != nil || MustImageRef("a:1").Pinned() != nil {
		t.Fatal("a whole pin, or none, is refused")
	}
}
