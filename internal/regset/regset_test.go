package regset

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The clones under STATE_DIR/registries join the config's registries (a
// name the config gives keeps its path); a disabled one is set apart
// with the recipes directories inside it; enabling it brings it back.
func TestResolveAddsClonesAndSetsDisabledApart(t *testing.T) {
	state := t.TempDir()
	for _, n := range []string{"eugr", "arena", "Bad", ".hidden"} {
		if err := os.MkdirAll(filepath.Join(state, "registries", n, ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	valid := func(s string) error {
		if s == "Bad" {
			return errors.New("not a name")
		}
		return nil
	}
	arena := filepath.Join(state, "registries", "arena")
	regs := map[string]string{"eugr": "/srv/eugr-clone"}
	dirs := []string{"/srv/lanes", filepath.Join(arena, "official-recipes"), arena + "-other"}
	on, off, kept := Resolve(state, regs, dirs, valid)
	if len(on) != 2 || on["eugr"] != "/srv/eugr-clone" || on["arena"] != arena || off != nil || len(kept) != 3 {
		t.Fatalf("on %v off %v kept %v", on, off, kept)
	}
	if changed, err := Set(state, "arena", true); !changed || err != nil {
		t.Fatalf("disable: %v %v", changed, err)
	}
	if changed, _ := Set(state, "arena", true); changed {
		t.Error("disabling twice changed something")
	}
	on, off, kept = Resolve(state, regs, dirs, valid)
	if len(on) != 1 || off["arena"] != arena || len(kept) != 2 || kept[1] != arena+"-other" || len(regs) != 1 {
		t.Fatalf("disabled: on %v off %v kept %v (regs %v)", on, off, kept, regs)
	}
	if changed, err := Set(state, "arena", false); !changed || err != nil || len(Disabled(state)) != 0 {
		t.Fatalf("enable: %v %v %v", changed, err, Disabled(state))
	}
}
