package itest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A night with a node off, through the real server and workers: a node
// sparklane powered down (power off, its worker gone with it) is "off, not
// verified" — verify passes and names it; a node that should be up and
// whose worker is gone is still a failure (no worker).
func TestVerifyNodeOffIsNotVerifiedNotDrift(t *testing.T) {
	f, _ := demoFleet(t, 8<<20)
	ctx := withTimeout(t, 10*time.Minute)
	if code, out, errOut := f.starter(ctx, "stage", "--lane", "demo-2x"); code != 0 {
		t.Fatalf("stage demo-2x: exit %d\n%s\n%s", code, out, errOut)
	}
	// n2 has no relay or shutdown configured and no SSH to probe: the
	// forced power off runs the sequence and records it as powered down.
	if code, out, errOut := f.starter(ctx, "power", "off", "n2", "--force", "--wait", "2s", "--json"); code != 0 {
		t.Fatalf("power off n2: exit %d\n%s\n%s", code, out, errOut)
	}
	f.stopNode("n2")

	type verifyOut struct {
		OK       bool     `json:"ok"`
		Error    string   `json:"error"`
		NoWorker []string `json:"no_worker"`
		Off      []string `json:"off"`
		Nodes    []struct {
			Node string `json:"node"`
			OK   int    `json:"ok"`
			Off  bool   `json:"off"`
		} `json:"nodes"`
	}
	code, out, errOut := f.starter(ctx, "verify", "--lane", "demo-2x", "--json")
	var v verifyOut
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("verify: exit %d, not JSON: %v\n%s\n%s", code, err, out, errOut)
	}
	if code != 0 || !v.OK || len(v.Off) != 1 || v.Off[0] != "n2" || len(v.NoWorker) != 0 {
		t.Fatalf("verify with n2 powered off: exit %d %+v\n%s", code, v, errOut)
	}
	for _, n := range v.Nodes {
		if (n.Node == "n2") != n.Off || (n.Node == "n1" && n.OK == 0) {
			t.Errorf("block %+v: want n1 verified, n2 off", n)
		}
	}
	code, out, _ = f.starter(ctx, "verify", "--lane", "demo-2x")
	if code != 0 || !strings.Contains(out, "off, not verified: n2 (powered off by sparklane at ") {
		t.Errorf("verify table: exit %d\n%s", code, out)
	}

	// n1 should be up and its worker is gone: still an error.
	f.stopNode("n1")
	code, out, errOut = f.starter(ctx, "verify", "--lane", "demo-2x", "--json")
	v = verifyOut{}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("verify: exit %d, not JSON: %v\n%s\n%s", code, err, out, errOut)
	}
	if code == 0 || v.OK || len(v.NoWorker) != 1 || v.NoWorker[0] != "n1" || len(v.Off) != 1 {
		t.Errorf("verify with n1 down and n2 off: exit %d %+v; want a failure naming n1, n2 still off", code, v)
	}
	saveHistory(t, f, "verify/demo-2x", "verify-node-off")
}
