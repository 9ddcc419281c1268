package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// progImage builds internal/engine/serve's test program into a FROM scratch image
// (no registry) and returns its tag.
func progImage(t *testing.T, d *client.Client) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "../engine/serve/testdata/prog")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build prog: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	df := []byte("FROM scratch\nCOPY prog /prog\nENTRYPOINT [\"/prog\"]\n")
	_ = tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(df))})
	_, _ = tw.Write(df)
	_ = tw.WriteHeader(&tar.Header{Name: "prog", Mode: 0o755, Size: int64(len(b))})
	_, _ = tw.Write(b)
	_ = tw.Close()
	tag := "sparklane-test/cli-logs:latest"
	resp, err := d.ImageBuild(context.Background(), &ctxTar, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true, Labels: map[string]string{"sparklane.test": "1"}, Version: build.BuilderV1})
	if err != nil {
		t.Fatalf("image build: %v", err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); err != nil {
			break
		}
		if msg.Error != "" {
			t.Fatalf("image build: %s", msg.Error)
		}
	}
	return tag
}

// `starter logs` reads each rank's log from its own node's Docker: n1
// through the local socket, n2 through SSH (the real loopback sshd, host
// key checked) — here the same engine, each container labelled for its
// node as the node workers label them.
func TestLogsAcrossNodes(t *testing.T) {
	d, err := client.NewClientWithOpts(client.WithHost("unix:///var/run/docker.sock"), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	img := progImage(t, d)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	lane := "t-logs-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		cs, _ := d.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", contract.LabelLane+"="+lane))})
		for _, c := range cs {
			_ = d.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
		}
	})
	ctx := context.Background()
	for _, r := range []serve.RankSpec{
		{Lane: lane, Node: "n1", Rank: 0, RecipeHash: "h", Image: img, Argv: []string{"print:2", "eprint:head boot line", "exit:0"}},
		{Lane: lane, Node: "n2", Rank: 1, RecipeHash: "h", Image: img, Argv: []string{"eprint:worker joined", "nap:1500", "eprint:worker done", "exit:0"}},
	} {
		if _, err := serve.StartRank(ctx, d, r); err != nil {
			t.Fatal(err)
		}
	}
	srv := sshdtest.Start(t)
	tg := srv.Target()
	cfg := writeConfigTestFile(t, t.TempDir(), "sparklane.toml", fmt.Sprintf(`recipes_dir = %q
[[nodes]]
name = "n1"
roots = ["/nvme"]
[[nodes]]
name = "n2"
ssh = "%s@127.0.0.1:%d"
known_hosts = %q
identity = %q
roots = ["/nvme"]
[[clusters]]
name = "both"
nodes = ["n1", "n2"]
`, t.TempDir(), tg.User, tg.Port, tg.KnownHosts, tg.Identity))

	// -f follows both ranks until each container stops.
	code, out, errOut := runStarter(t, "--config", cfg, "logs", "--lane", lane, "-f")
	for _, want := range []string{"[n1 r0] line-1", "[n1 r0] line-2", "[n1 r0] head boot line", "[n2 r1] worker joined", "[n2 r1] worker done"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("logs -f: %q missing (exit %d)\n%s\n%s", want, code, out, errOut)
		}
	}
	code, out, _ = runStarter(t, "--config", cfg, "logs", "--lane", lane, "--rank", "1", "--tail", "1")
	if code != 0 || strings.TrimSpace(out) != "[n2 r1] worker done" {
		t.Errorf("logs --rank 1 --tail 1: exit %d\n%s", code, out)
	}
	code, out, _ = runStarter(t, "--config", cfg, "--json", "logs", "--lane", lane)
	var logs []struct {
		Node  string   `json:"node"`
		Rank  int      `json:"rank"`
		Lines []string `json:"lines"`
	}
	if err := json.Unmarshal([]byte(out), &logs); code != 0 || err != nil || len(logs) != 2 || logs[1].Node != "n2" || logs[1].Lines[0] != "worker joined" {
		t.Errorf("logs --json: exit %d %v\n%s", code, err, out)
	}
	code, _, errOut = runStarter(t, "--config", cfg, "logs", "--lane", "t-logs-none")
	if code == 0 || !strings.Contains(errOut, "no container of lane t-logs-none on nodes n1, n2") {
		t.Errorf("logs of an absent lane: exit %d %s", code, errOut)
	}
}
