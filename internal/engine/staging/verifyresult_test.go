package staging

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// 20,000 missing paths: the JSON form carries the counts and the first
// ListLimit paths of each list (a few KB, not a MB), round-trips to the
// same counts, and Spill keeps every path in a file on disk.
func TestVerifyResultIsBoundedAndSpillsTheFullLists(t *testing.T) {
	v := VerifyResult{OK: 3}
	for i := 0; i < 20000; i++ {
		v.Missing = append(v.Missing, fmt.Sprintf("/srv/sparklane/hf/models--x--y/blobs/%064d", i))
	}
	v.Bad = []string{"/srv/a", "/srv/b"}
	dir := t.TempDir()
	dc := NewDirs([]string{dir})
	defer dc.Close()
	d, err := dc.Dir(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Spill(d, "verify-weights.txt"); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 8<<10 {
		t.Errorf("JSON of a 20,000-path result is %d bytes; want a few KB", len(b))
	}
	var back VerifyResult
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.NMissing() != 20000 || back.NBad() != 2 || len(back.Missing) != ListLimit || len(back.Bad) != 2 || back.Clean() || !back.Truncated() {
		t.Errorf("round trip: %d/%d missing, %d/%d bad, clean=%v truncated=%v", len(back.Missing), back.NMissing(), len(back.Bad), back.NBad(), back.Clean(), back.Truncated())
	}
	if back.ListFile != filepath.Join(dir, "verify-weights.txt") {
		t.Errorf("list file %q", back.ListFile)
	}
	full, err := os.ReadFile(back.ListFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(full)), "\n")
	if len(lines) != 20002 || lines[0] != "bad /srv/a" || lines[20001] != "missing "+v.Missing[19999] {
		t.Errorf("list file has %d lines (first %q, last %q); want 20002", len(lines), lines[0], lines[len(lines)-1])
	}
	// Marshalling an already cut result keeps the counts.
	b2, _ := json.Marshal(back)
	var again VerifyResult
	if err := json.Unmarshal(b2, &again); err != nil || again.NMissing() != 20000 {
		t.Errorf("second round trip: %v, %d missing", err, again.NMissing())
	}
	// A small result is whole and writes nothing.
	small := VerifyResult{Bad: []string{"/srv/x"}}
	if err := small.Spill(d, "small.txt"); err != nil || small.ListFile != "" {
		t.Errorf("small spill: %v, list file %q", err, small.ListFile)
	}
	if _, err := os.Stat(filepath.Join(dir, "small.txt")); !os.IsNotExist(err) {
		t.Errorf("a small result wrote a list file: %v", err)
	}
	if sb, _ := json.Marshal(small); strings.Contains(string(sb), "count") {
		t.Errorf("a whole result carries counts: %s", sb)
	}
}
