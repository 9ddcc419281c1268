package itest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// A hub repo of 20,000 small files whose destination was wiped: verify
// through the real server and node worker finds all 20,000 missing, the
// run completes, the result carries the count and the first paths only,
// and the whole history stays far under 1 MB (it would be ~2 MB of paths
// otherwise, past Temporal's payload limit).
func TestVerifyOfAWipedTwentyThousandFileMirrorKeepsHistorySmall(t *testing.T) {
	const n = 20000
	nas := writeHub(t, "many-files", n)
	recipe := hubRecipe("many", "solo", "many-files", "", nas)
	f := newFleet(t, fleetOptions{nodes: 1, clusters: map[string][]string{"solo": {"n1"}}, shared: nas, recipes: map[string]string{"many": recipe}})
	f.startControl()
	f.startNode("n1")
	ctx := withTimeout(t, 5*time.Minute)

	start := time.Now()
	code, out, errOut := f.starter(ctx, "verify", "--lane", "many")
	took := time.Since(start)
	if code != 1 || !strings.Contains(errOut, "missing") {
		t.Fatalf("verify of the wiped mirror: exit %d, want 1 saying what is missing\n%s\n%s", code, out, errOut)
	}

	id := contract.VerifyID("many")
	var res contract.VerifyWorkflowResult
	err := f.env.Client.GetWorkflow(ctx, id, "").Get(ctx, &res)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != fault.ContentMismatch || ae.Details(&res) != nil {
		t.Fatalf("verify run: %v; want a ContentMismatch failure carrying the result", err)
	}
	// Every blob, every snapshot link and the bind manifest are missing.
	if m := regexp.MustCompile(`(\d+) missing`).FindStringSubmatch(err.Error()); m == nil || m[1] != fmt.Sprint(2*n+1) {
		t.Errorf("verify error %q does not count the %d missing paths", err, 2*n+1)
	}
	var missing, listed int
	for _, b := range res.Blocks {
		missing += b.Result.NMissing()
		listed += len(b.Result.Missing)
	}
	if missing != 2*n+1 || listed != staging.ListLimit {
		t.Errorf("result: %d missing counted, %d listed; want %d counted and %d listed", missing, listed, 2*n+1, staging.ListLimit)
	}
	// The full list is a file on the node, in the block's dst (beneath the
	// node's roots), named in the result and by the CLI: one line a path.
	wantList := filepath.Join(f.dir, "nodes", "n1", "srv", "sparklane", "hf", activities.VerifyListName("many", "weights"))
	if len(res.Blocks) != 1 || res.Blocks[0].Result.ListFile != wantList {
		t.Fatalf("result blocks %d, list file %q; want %s", len(res.Blocks), res.Blocks[0].Result.ListFile, wantList)
	}
	if !strings.Contains(out, "full list: "+wantList+" on n1") {
		t.Errorf("verify output does not name the full list %s:\n%s", wantList, out)
	}
	full, err := os.ReadFile(wantList)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(full), "\n"), "\n")
	if len(lines) != 2*n+1 || !strings.HasPrefix(lines[0], "missing ") || lines[len(lines)-1] == "" {
		t.Errorf("full list has %d lines (first %q); want %d 'missing PATH' lines", len(lines), lines[0], 2*n+1)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, "missing "+filepath.Join(f.dir, "nodes", "n1", "srv")) {
			t.Fatalf("full list line %d %q is not a missing path beneath the node's root", i, l)
		}
	}

	it := f.env.Client.GetWorkflowHistory(context.Background(), id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	size, events := 0, 0
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		size += proto.Size(e)
		events++
	}
	t.Logf("verify of %d missing files: %s, history %d events, %d bytes; full list %d bytes on the node", n, took.Round(time.Millisecond), events, size, len(full))
	if size >= 1<<20 {
		t.Errorf("history of %s is %d bytes; want under 1 MB", id, size)
	}
}

// writeHub writes a NAS with a hub repo demo/NAME of n small files (blobs
// and snapshot links) and returns the NAS root; the hub is NAS/hub.
// hubRecipe is a sim lane on cluster that mirrors demo/<repo> from
// writeHub's nas (verify sampled); extra lines go after its command.
func hubRecipe(name, cluster, repo, extra, nas string) string {
	return fmt.Sprintf(`name = %q
cluster = %q
runtime = "sim"
image = "sparklane/engine-sim:latest"
model = "demo/%s"
command = "/engine-sim /hub --port {port}"
%s
[[staging]]
kind = "hub-mirror"
id = "weights"
src = %q
dst = "/srv/sparklane/hf"
repos = ["demo/%s"]
verify = "sampled"
`, name, cluster, repo, extra, filepath.Join(nas, "hub"), repo)
}

func writeHub(t *testing.T, name string, n int) string {
	t.Helper()
	nas := filepath.Join(t.TempDir(), "nas")
	repo := filepath.Join(nas, "hub", "models--demo--"+name)
	rev := strings.Repeat("ab", 20)
	for _, d := range []string{"blobs", "refs", filepath.Join("snapshots", rev, "shards")} {
		if err := os.MkdirAll(filepath.Join(repo, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(rev), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		data := []byte(fmt.Sprintf("shard %d\n", i))
		sum := sha256.Sum256(data)
		blob := hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(repo, "blobs", blob), data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../../blobs/"+blob, filepath.Join(repo, "snapshots", rev, "shards", fmt.Sprintf("part-%05d.bin", i))); err != nil {
			t.Fatal(err)
		}
	}
	return nas
}
