package cli

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/testkit/conftest"
)

func TestFormatLanes(t *testing.T) {
	rs, err := config.LoadRecipes(conftest.ShippedRecipes(t))
	if err != nil {
		t.Fatal(err)
	}
	rows := FormatLanes(rs)
	var mia []string
	for _, r := range rows {
		if len(r) != len(LaneColumns) {
			t.Fatalf("row %v has %d columns", r, len(r))
		}
		if r[0] == "dsv41-flash-4x-mia" {
			mia = r
		}
	}
	want := []string{"dsv41-flash-4x-mia", "mia", "4nodes-switch", "sglang", "sparse-rows:engram"}
	if strings.Join(mia, "|") != strings.Join(want, "|") {
		t.Fatalf("mia row %v, want %v", mia, want)
	}
	if rows[0][0] != "aiden16" {
		t.Fatalf("rows not sorted: %v", rows)
	}
}
