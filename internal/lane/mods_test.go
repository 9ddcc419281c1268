package lane

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A mod travels in the plan to every node while the plan's mods stay
// under contract.MaxModArchives; past it the nodes that did not get it
// read the path, and the plan says so.
func TestModsCarriedInThePlanWithinBudget(t *testing.T) {
	dir := t.TempDir()
	small, big := filepath.Join(dir, "mods", "small"), filepath.Join(dir, "mods", "big")
	for _, m := range []string{small, big} {
		if err := os.MkdirAll(m, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, m, "run.sh", "echo "+filepath.Base(m)+"\n")
	}
	blob := make([]byte, 150<<10) // random: a tar of it does not shrink
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(big, "weights.bin"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := sparkFleet()
	p := writeFile(t, dir, "modded.yaml", "model: org/m\nruntime: vllm\ncontainer: img\ncommand: vllm serve {model}\ndefaults:\n  tensor_parallel: 4\nmods:\n  - small\n")
	plan, err := RenderOn(cfg, mustRecipe(t, p), "quad", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range plan.Nodes {
		if a := n.PreExec[0].Archive; !bytes.Contains(a, []byte("workspace/mods/small/run.sh")) {
			t.Errorf("%s: the small mod is not in the plan (%d bytes)", n.Node, len(a))
		}
	}

	p = writeFile(t, dir, "heavy.yaml", "model: org/m\nruntime: vllm\ncontainer: img\ncommand: vllm serve {model}\ndefaults:\n  tensor_parallel: 4\nmods:\n  - big\n")
	plan, err = RenderOn(cfg, mustRecipe(t, p), "quad", nil)
	if err != nil {
		t.Fatal(err)
	}
	carried := 0
	for _, n := range plan.Nodes {
		if len(n.PreExec[0].Archive) > 0 {
			carried++
		}
	}
	if carried != 2 || !strings.Contains(strings.Join(plan.Warnings, "\n"), "pre_exec copy "+big+": not carried in the plan to every node") {
		t.Errorf("a 150 KiB mod on 4 nodes: carried to %d (want 2 within 384 KiB), warnings %q", carried, plan.Warnings)
	}
}
