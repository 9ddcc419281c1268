package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dockerimage "github.com/docker/docker/api/types/image"

	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/simimage"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// The shipped recipes/sim-demo.toml on a 3-node fleet whose default
// cluster is all of them: `cutover --lane sim-demo --fetch` alone finds
// the engine-sim image on no node, builds it on the head from scratch
// (as `image build --sim`), fetches its model from a Hub double into the
// fleet's own NAS hub root ({hf_cache_dir}), stages it on every node,
// serves one rank per node and answers — through the real server,
// workers, Docker and containers; `image build --sim` then rebuilds it.
// The itest nodes share this machine's one Docker engine with the tests
// beside this one, so "on no node" is arranged with a tag of the
// engine-sim repository that no Docker has (the recipe's one edit, the
// image's tag; removed at the end), never by removing :latest there.
// Only the ports are given (-o), so runs beside this one do not collide.
func TestShippedSimDemoFromTheHubDouble(t *testing.T) {
	ctx := withTimeout(t, 10*time.Minute)
	dc, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		t.Fatalf("Docker is required (real containers): %v", err)
	}
	t.Cleanup(func() { removeLaneContainers(dc, "sim-demo"); dc.Close() })
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "recipes", "sim-demo.toml"))
	if err != nil {
		t.Fatal(err)
	}
	image := fmt.Sprintf("%s:itest-%d", simimage.Repo, time.Now().UnixNano())
	recipe := strings.Replace(string(b), `image = "`+simimage.Repo+`:latest"`, fmt.Sprintf("image = %q", image), 1)
	if recipe == string(b) {
		t.Fatalf("recipes/sim-demo.toml no longer names %s:latest", simimage.Repo)
	}
	t.Cleanup(func() { _, _ = dc.ImageRemove(context.Background(), image, dockerimage.RemoveOptions{}) })
	model := t.TempDir()
	simtest.WriteModel(t, model, simtest.Model{Shards: 2, Tensors: 2, Rows: 256, Cols: 64})
	var files []hubtest.File
	entries, _ := os.ReadDir(model)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(model, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, hubtest.File{Path: e.Name(), Data: data})
	}
	s := hubtest.New(hubtest.Options{})
	t.Cleanup(s.Close)
	const repo = "optimum-internal-testing/tiny-random-llama"
	s.AddRepo(hubtest.Repo{ID: repo, LFSThreshold: 1 << 10, Files: files})
	dir := t.TempDir()
	hub := filepath.Join(dir, "nas", "hub")
	f := newFleet(t, fleetOptions{nodes: 3, clusters: map[string][]string{"all": {"n1", "n2", "n3"}}, shared: filepath.Join(dir, "nas"),
		roots:   []string{"/mnt/nvme/sparklane"},
		extra:   fmt.Sprintf("hf_cache_dir = %q\nhf_endpoint = %q\ndefault_cluster = \"all\"\n", hub, s.URL),
		recipes: map[string]string{"sim-demo": recipe}})
	f.startControl()
	for _, n := range []string{"n1", "n2", "n3"} {
		f.startNode(n)
	}

	if _, err := dc.ImageInspect(ctx, image); err == nil {
		t.Fatalf("%s is on this machine's Docker before the cutover", image)
	}

	port := freePort(t) // port+1000 is free too: the ranks' rendezvous
	dist := port + 1000
	code, out, errOut := f.starter(ctx, "cutover", "--lane", "sim-demo", "--fetch", "-o", fmt.Sprintf("port=%d", port), "-o", fmt.Sprintf("dist_port=%d", dist))
	if code != 0 {
		t.Fatalf("cutover --lane sim-demo --fetch: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("cutover --lane sim-demo --fetch:\n%s", out)
	if _, err := dc.ImageInspect(ctx, image); err != nil {
		t.Errorf("no %s after the cutover built it: %v", image, err)
	}
	for _, want := range []string{"image " + image + " is on no node of sim-demo: building it on n1 from ", "(as `starter image build --sim`)",
		"cutover to sim-demo on all: ok", "smoke \"What is 127*89?\" → ", fmt.Sprintf("serving at http://127.0.0.1:%d", port)} {
		if !strings.Contains(out, want) {
			t.Errorf("cutover output lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(hub, "models--optimum-internal-testing--tiny-random-llama", "refs", "main")); err != nil {
		t.Errorf("the fetch did not write into the fleet's hub root %s: %v", hub, err)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		staged := filepath.Join(f.dir, "nodes", n, "mnt", "nvme", "sparklane", "sim-demo", "hub", "models--optimum-internal-testing--tiny-random-llama")
		if _, err := os.Stat(staged); err != nil {
			t.Errorf("node %s: not staged under its root: %v", n, err)
		}
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/models", port))
	if err != nil {
		t.Fatalf("the lane does not answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &models) != nil || len(models.Data) != 1 || models.Data[0].ID != repo {
		t.Errorf("/v1/models: %s", body)
	}
	if code, out, errOut = f.starter(ctx, "stop", "--lane", "sim-demo"); code != 0 {
		t.Errorf("stop: exit %d\n%s%s", code, out, errOut)
	}
	// image build --sim still builds (here: finds the same engine-sim
	// already built) and tags the lane's image, the image step alone.
	code, out, errOut = f.starter(ctx, "image", "build", "--sim")
	if code != 0 || !strings.Contains(out, "built on n1: sha256:") || !strings.Contains(out, "engine-sim image "+simimage.Repo+":") {
		t.Fatalf("image build --sim: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("image build --sim:\n%s%s", errOut, out)
}
