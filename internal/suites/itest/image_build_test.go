package itest

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"

	"github.com/sparklane/sparklane/internal/contract"
)

// A lane whose image is on no node but whose recipe has [build]: the
// cutover's image step builds it on the head from a context on the shared
// root (engine-sim, FROM scratch, on this machine's real Docker), then the
// lane serves it. The dry run says so first; a failing build names its
// failing step. The cutover's history joins the corpus as cutover-build.
func TestCutoverBuildsAnImageOnNoNode(t *testing.T) {
	f, dc := demoFleet(t, 8<<20)
	ctx := withTimeout(t, 10*time.Minute)
	tag, suffix := imageTag(t, dc, "built")
	dir := simContext(ctx, t, f, dc, "sim-"+suffix)
	lane := imageLane(t, f, "built-2x")

	// A failing build: the step and the last lines.
	lane(tag, "", "\n[build]\ncontext = \""+dir+"\"\ndockerfile = \"Dockerfile.bad\"\n")
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile.bad"), []byte("FROM scratch\nCOPY no-such-file /x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := f.starter(ctx, "image", "build", "--lane", "built-2x")
	if code == 0 || !strings.Contains(errOut+out, "no-such-file") || !strings.Contains(errOut+out, "last lines") {
		t.Fatalf("a failing build: exit %d\n%s\n%s\nwant the failing COPY and the log's last lines", code, out, errOut)
	}

	lane(tag, "", "\n[build]\ncontext = \""+dir+"\"\n")
	code, out, errOut = f.starter(ctx, "cutover", "--lane", "built-2x", "--dry-run")
	if code != 0 || !strings.Contains(out, "would be built on n1") {
		t.Fatalf("dry run: exit %d\n%s\n%s\nwant the image to be built on n1", code, out, errOut)
	}
	if code, out, errOut = f.starter(ctx, "cutover", "--lane", "built-2x"); code != 0 {
		t.Fatalf("cutover of a lane whose image is on no node: exit %d\n%s\n%s", code, out, errOut)
	}
	ins, err := dc.ImageInspect(ctx, tag)
	if err != nil || ins.Config == nil || len(ins.Config.Entrypoint) == 0 || ins.Config.Entrypoint[0] != "/engine-sim" {
		t.Fatalf("built image %s: %v %+v", tag, err, ins.Config)
	}
	if n := activitiesScheduled(t, f, contract.CutoverID("demo-2x"), "BuildImage"); n != 1 {
		t.Errorf("cutover built %d times, want 1", n)
	}
	saveHistory(t, f, contract.CutoverID("demo-2x"), "cutover-build")
	if code, out, errOut = f.starter(ctx, "stop", "--lane", "built-2x"); code != 0 {
		t.Fatalf("stop: exit %d\n%s\n%s", code, out, errOut)
	}
}

// starter images asks each node's worker for its images: the demo lanes'
// image is listed with the lanes naming it, its size and last use.
func TestStarterImagesListsTheLanesImages(t *testing.T) {
	f, dc := demoFleet(t, 8<<20)
	ctx := withTimeout(t, 5*time.Minute)
	code, out, errOut := f.starter(ctx, "--json", "images", "--node", "n1")
	if code != 0 {
		t.Fatalf("images: exit %d\n%s\n%s", code, out, errOut)
	}
	var res struct {
		Nodes []struct {
			Node   string                 `json:"node"`
			Images []contract.ImageListed `json:"images"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("images --json: %v\n%s", err, out)
	}
	if len(res.Nodes) != 1 || res.Nodes[0].Node != "n1" || len(res.Nodes[0].Images) == 0 {
		t.Fatalf("images of n1: %s", out)
	}
	first := res.Nodes[0].Images[0]
	ins, err := dc.ImageInspect(ctx, first.ID)
	if err != nil || !slices.Contains(first.Lanes, "demo-2x") || first.Size != ins.Size || first.LastUsed.IsZero() {
		t.Errorf("first image %+v (inspect %v), want the demo lanes' image first, with its size and last use", first, err)
	}
	if code, text, _ := f.starter(ctx, "images", "--node", "n1"); code != 0 || !strings.Contains(text, "lane demo-") || !strings.Contains(text, "LAST USED") {
		t.Errorf("images table: exit %d\n%s", code, text)
	}
}

// disk prune --lru --dry-run through the node's worker: an image no lane
// names and no container uses is among those it would remove (least
// recently used first), the lanes' image is not, and nothing is removed.
func TestDiskPruneLRUWouldRemoveUnusedImages(t *testing.T) {
	f, dc := demoFleet(t, 8<<20)
	ctx := withTimeout(t, 5*time.Minute)
	tag, _ := imageTag(t, dc, "unused")
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for name, body := range map[string]string{"Dockerfile": "FROM scratch\nCOPY f /f\n", "f": tag} {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body))})
		_, _ = tw.Write([]byte(body))
	}
	_ = tw.Close()
	resp, err := dc.ImageBuild(ctx, &tb, build.ImageBuildOptions{Tags: []string{tag}, Remove: true})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	unused, err := dc.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	_, out, errOut := f.starter(ctx, "--json", "disk", "prune", "--lru", "--free", "1000T", "--dry-run", "--node", "n1")
	var res struct {
		Nodes []struct {
			Disk *struct {
				ImagePrune *contract.ImagePrune `json:"image_prune"`
			} `json:"disk"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Nodes) != 1 || res.Nodes[0].Disk == nil || res.Nodes[0].Disk.ImagePrune == nil {
		t.Fatalf("disk prune --lru --dry-run: %v\n%s\n%s", err, out, errOut)
	}
	p := res.Nodes[0].Disk.ImagePrune
	var ids []string
	for _, l := range p.Removed {
		ids = append(ids, l.ID)
		if len(l.Lanes) > 0 || l.Containers > 0 {
			t.Errorf("the dry run would remove %+v, which a lane or a container uses", l)
		}
	}
	if !p.DryRun || p.Root == "" || !slices.Contains(ids, unused.ID) {
		t.Errorf("image prune %+v, want a dry run on Docker's root that would remove %s", p, unused.ID)
	}
	if _, err := dc.ImageInspect(ctx, tag); err != nil {
		t.Errorf("a dry run removed %s: %v", tag, err)
	}
}
