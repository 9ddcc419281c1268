package cli

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// A hub-mirror block whose repo is not (wholly) on the NAS is planned
// after the fetch when the run fetches it first — the fetch's files and
// bytes, no "download it on the NAS" —, and stays refused when nothing
// fetches it or the refusal is another one.
func TestDryBlockAfterTheFetch(t *testing.T) {
	fp := &contract.FetchPlan{Lane: "l", Repos: []contract.FetchRepo{{Block: "weights", Repo: "org/m", Revision: "main", CacheDir: "/nas/hub"}}}
	fr := &contract.FetchResult{Repos: []contract.FetchRepoResult{{Block: "weights", Repo: "org/m", Commit: strings.Repeat("c", 40), Files: 4, Bytes: 3 << 30, MissingFiles: 4, MissingBytes: 3 << 30}}}
	missing := contract.StageBlockResult{Block: "weights", Kind: "hub-mirror", Error: "repo org/m: /nas/hub/models--org--m is not in src: download it on the NAS", ErrorType: fault.SourceMissing}
	b := dryBlock(missing, fp, fr)
	if b.Error != "" || len(b.AfterFetch) != 1 || b.AfterFetch[0].Files != 4 {
		t.Fatalf("block after the fetch: %+v", b)
	}
	if got := afterFetchText(b.AfterFetch); got != "after the fetch: copy up to 4 files / 3.0 GiB (what the fetch writes: org/m@cccccccccccc 4 files / 3.0 GiB), less what the node already holds" {
		t.Errorf("text: %s", got)
	}
	incomplete := missing
	incomplete.ErrorType = fault.SourceIncomplete
	if b := dryBlock(incomplete, fp, nil); b.Error != "" || b.AfterFetch == nil || !strings.HasPrefix(afterFetchText(b.AfterFetch), "after the fetch: its repos are not on the NAS yet") {
		t.Errorf("an unfinished download the fetch finishes, without its dry run: %+v", b)
	}
	if b := dryBlock(missing, nil, nil); b.Error != missing.Error || b.ErrorType != fault.SourceMissing || b.AfterFetch != nil {
		t.Errorf("no fetch: the refusal stays: %+v", b)
	}
	other := missing
	other.Block = "draft"
	if b := dryBlock(other, fp, fr); b.Error == "" || b.AfterFetch != nil {
		t.Errorf("a block the fetch does not cover: %+v", b)
	}
	full := missing
	full.ErrorType = fault.NoSpace
	if b := dryBlock(full, fp, fr); b.Error == "" || b.AfterFetch != nil {
		t.Errorf("another refusal: %+v", b)
	}
	steps := fetchSteps(fp, fr, "l")
	if len(steps) != 1 || steps[0] != "fetch org/m@main from the Hub into /nas/hub on control: 4 of 4 files (3.0 GiB of 3.0 GiB) to download" {
		t.Errorf("fetch steps: %q", steps)
	}
	if steps := fetchSteps(fp, &contract.FetchResult{Error: "repo org/m: not found"}, "l"); !strings.HasSuffix(steps[0], ": would stop: repo org/m: not found") {
		t.Errorf("fetch steps of a refused fetch: %q", steps)
	}
}
