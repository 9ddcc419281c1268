package serve_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/serve"
)

// TestLaneFactsAreInspected: what a bench report records of a lane is read
// back from Docker — the running rank containers of that node only, their
// image ID and process args — not taken from the recipe.
func TestLaneFactsAreInspected(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx := context.Background()
	for _, s := range []serve.RankSpec{
		spec(lane, "facts-n1", 0, "h", img, "sleep"),
		spec(lane, "facts-n2", 1, "h", img, "print:1", "sleep"),
	} {
		startRank(t, ctx, d, s)
	}
	facts, err := serve.LaneFacts(ctx, d, lane, "facts-n2")
	if err != nil {
		t.Fatal(err)
	}
	ins, _, err := d.ImageInspectWithRaw(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	if len(facts) != 1 {
		t.Fatalf("facts of node facts-n2: %+v, want its one container", facts)
	}
	f := facts[0]
	if f.Node != "facts-n2" || f.Rank != 1 || f.Image != img || f.ImageID != ins.ID || !strings.HasPrefix(f.ImageID, "sha256:") {
		t.Errorf("facts %+v, want rank 1 of image %s (%s)", f, img, ins.ID)
	}
	if got := strings.Join(f.Args, " "); !strings.HasSuffix(got, "print:1 sleep") {
		t.Errorf("args %q, want the container's process ending in print:1 sleep", got)
	}
	if f.ImageDigest != "" {
		t.Errorf("a locally built image has digest %q; only registry images have one", f.ImageDigest)
	}
	if none, err := serve.LaneFacts(ctx, d, lane, "facts-n9"); err != nil || len(none) != 0 {
		t.Errorf("another node's facts: %+v %v, want none", none, err)
	}
}

// A pinned repo:tag@sha256:D moved to a node by `docker load` is there
// under its tag without the repo digest, so Docker cannot find it by the
// pinned reference: the rank is created from the image ID the serve
// step's check resolved, and its facts still name the recipe's reference.
func TestStartRankFromThePinnedImageID(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx := context.Background()
	ins, _, err := d.ImageInspectWithRaw(ctx, img)
	if err != nil {
		t.Fatal(err)
	}
	pinned := img + "@sha256:" + strings.Repeat("5a", 32)
	s := spec(lane, "pin-n1", 0, "h", pinned, "sleep")
	if _, err := serve.StartRank(ctx, d, s); err == nil {
		t.Fatalf("a container from %s without the repo digest started: the test image must carry no digest", pinned)
	}
	s.ImageID = ins.ID
	startRank(t, ctx, d, s)
	facts, err := serve.LaneFacts(ctx, d, lane, "pin-n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(facts) != 1 || facts[0].ImageID != ins.ID || facts[0].Image != pinned {
		t.Errorf("facts %+v, want one rank of image ID %s shown as %s", facts, ins.ID, pinned)
	}
}
