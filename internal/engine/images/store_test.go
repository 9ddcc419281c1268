package images

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
)

// Listing and an LRU prune on real Docker: a lane's image and one a
// stopped container uses are kept; unused images go least recently used
// first, only until the free target is reached; a dry run removes nothing.
func TestListAndPruneUnusedImagesLRU(t *testing.T) {
	d := dockerClient(t)
	ctx := context.Background()
	repo := "sparklane-imgtest/prune-" + randHex(3)
	lane := buildImage(t, d, repo+":lane", "", 4096)
	held := buildImage(t, d, repo+":held", "", 4096)
	older := buildImage(t, d, repo+":older", "", 4096)
	newer := buildImage(t, d, repo+":newer", "", 4096)
	c, err := d.ContainerCreate(ctx, &container.Config{Image: repo + ":held", Cmd: []string{"x"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })

	all, err := List(ctx, d, "h1", map[string][]string{repo + ":lane": {"mia"}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Only this test's images: the machine's others are not ours to prune.
	mine := map[string]bool{lane.ID: true, held.ID: true, older.ID: true, newer.ID: true}
	var listed []Listed
	for _, l := range all {
		if mine[l.ID] {
			listed = append(listed, l)
		}
	}
	if len(listed) != 4 || listed[0].ID != lane.ID || !slices.Equal(listed[0].Lanes, []string{"mia"}) {
		t.Fatalf("listed %+v, want the lane's image first, naming lane mia", listed)
	}
	for _, l := range listed {
		if l.ID == held.ID && (l.Containers != 1 || l.Running != 0 || l.Unused()) {
			t.Errorf("held image %+v, want one stopped container", l)
		}
	}
	// Docker's times have one-second steps: the two unused images' last
	// use is set an hour apart here, so the order Prune follows is known.
	for i := range listed {
		switch listed[i].ID {
		case older.ID:
			listed[i].LastUsed = time.Now().Add(-2 * time.Hour)
		case newer.ID:
			listed[i].LastUsed = time.Now().Add(-time.Hour)
		}
	}
	// A test double of the data root's free space: a base plus the sizes
	// of this test's images that are gone.
	const base = 1 << 30
	free := func(string) (int64, error) {
		f := int64(base)
		for _, l := range listed {
			if _, err := d.ImageInspect(ctx, l.ID); err != nil {
				f += l.Size
			}
		}
		return f, nil
	}
	dry := Prune(ctx, d, "h1", listed, base+1, true, free)
	if len(dry.Removed) != 1 || dry.Removed[0].ID != older.ID || dry.Error != "" {
		t.Fatalf("dry run %+v, want the older unused image only", dry)
	}
	if _, err := d.ImageInspect(ctx, older.ID); err != nil {
		t.Fatalf("a dry run removed %s: %v", older.ID, err)
	}
	p := Prune(ctx, d, "h1", listed, base+1<<40, false, free)
	if len(p.Removed) != 2 || p.Removed[0].ID != older.ID || p.Removed[1].ID != newer.ID || p.Enough {
		t.Fatalf("prune %+v, want both unused images, oldest first, and not enough", p)
	}
	for _, id := range []string{lane.ID, held.ID} {
		if _, err := d.ImageInspect(ctx, id); err != nil {
			t.Errorf("kept image %s was removed: %v", id, err)
		}
	}
	if k := strings.Join(p.Kept, "\n"); !strings.Contains(k, "lane mia uses it") || !strings.Contains(k, "1 stopped container(s) use it") {
		t.Errorf("kept %q, want why the lane's and the stopped container's images stay", k)
	}
}
