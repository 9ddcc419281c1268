package workflows

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// pullFakes mocks the registry pull: SendRegistryAuth hands out numbered
// credential paths (only those, never a login), PullImage fails with
// pullErrs in turn then puts the image on its node, DropRegistryAuth is
// recorded. Every PullImage input is kept.
type pullFakes struct {
	f     *fakeFleet
	errs  []error
	sent  int
	pulls []contract.PullImageInput
}

func mockPull(f *fakeFleet, errs ...error) *pullFakes {
	p := &pullFakes{f: f, errs: errs}
	f.env.OnActivity("SendRegistryAuth", any2...).Return(func(ctx context.Context, in contract.RegistryAuthInput) (contract.RegistryAuthResult, error) {
		f.record(ctx, "SendRegistryAuth "+in.Node+" "+in.Registry+" "+in.AuthFile)
		f.mu.Lock()
		defer f.mu.Unlock()
		p.sent++
		return contract.RegistryAuthResult{Path: fmt.Sprintf("/run/sparklane/registry-auth/pull-%032d.json", p.sent)}, nil
	})
	f.env.OnActivity("DropRegistryAuth", any2...).Return(func(ctx context.Context, in contract.RegistryAuthDrop) error {
		f.record(ctx, "DropRegistryAuth "+in.Node+" "+in.Path)
		return nil
	})
	f.env.OnActivity("PullImage", any2...).Return(func(ctx context.Context, in contract.PullImageInput) (contract.PullImageResult, error) {
		n := f.record(ctx, "PullImage "+in.Credentials)
		f.mu.Lock()
		defer f.mu.Unlock()
		p.pulls = append(p.pulls, in)
		if len(p.errs) > 0 {
			err := p.errs[0]
			p.errs = p.errs[1:]
			return contract.PullImageResult{Node: n}, err
		}
		delete(f.imageLack, n)
		return contract.PullImageResult{Node: n, ImagePulled: contract.ImagePulled{ID: "sha256:pulled", From: in.Registry + "/x"}}, nil
	})
	return p
}

// A pull with an auth file: each attempt gets the login handed to the
// node for it alone (send, pull with the path, drop after it, even when
// it failed); a network failure is tried again with a fresh file, then
// the image moves to the other node. The pull carries the insecure flag
// and the config file for its errors, and only paths.
func TestStagePullsWithALoginHandedForEachAttempt(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.imageLack["a"], f.imageLack["b"] = 0, 0
	p := mockPull(f, temporal.NewApplicationError("node a: registry 10.0.0.5:5000 unreachable from this node", "Transient"))
	pull := &contract.ImagePull{Image: contract.MustImageRef("img-new"), Registry: "10.0.0.5:5000", AuthFile: "/root/.docker/config.json", Node: "a", Insecure: true, ConfigFile: "/etc/sparklane/sparklane.toml"}
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), Pull: pull})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	path := func(n int) string { return fmt.Sprintf("/run/sparklane/registry-auth/pull-%032d.json", n) }
	want := []string{
		"SendRegistryAuth a 10.0.0.5:5000 /root/.docker/config.json", "PullImage " + path(1) + "@a", "DropRegistryAuth a " + path(1),
		"SendRegistryAuth a 10.0.0.5:5000 /root/.docker/config.json", "PullImage " + path(2) + "@a", "DropRegistryAuth a " + path(2),
	}
	calls := f.callList()
	if len(calls) < len(want)+1 || strings.Join(calls[:len(want)], "\n") != strings.Join(want, "\n") || !strings.HasPrefix(calls[len(want)], "TransferImage") {
		t.Fatalf("calls:\n%s\nwant first:\n%s\nthen the transfer", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
	in := p.pulls[1]
	if !in.Insecure || in.ConfigFile != "/etc/sparklane/sparklane.toml" || in.AuthFrom != "/root/.docker/config.json" || in.AuthFile != "" || in.Credentials != path(2) {
		t.Fatalf("PullImage input %+v", in)
	}
}

// A permanent failure (the registry refused the login) is not tried
// again, and its file is still dropped; a pull without an auth file
// hands nothing.
func TestStagePullRefusedOnceAndAnonymousPull(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.imageLack["a"], f.imageLack["b"] = 0, 0
	mockPull(f, temporal.NewNonRetryableApplicationError("node a: registry 10.0.0.5:5000 refused the credentials", fault.InvalidSpec, nil))
	pull := &contract.ImagePull{Image: contract.MustImageRef("img-new"), Registry: "10.0.0.5:5000", AuthFile: "/root/.docker/config.json", Node: "a"}
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), Pull: pull})
	if err := f.env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "refused the credentials") {
		t.Fatalf("stage: %v, want the refusal", err)
	}
	if f.count("PullImage") != 1 || f.count("DropRegistryAuth") != 1 || f.count("StageBlock") != 0 {
		t.Fatalf("calls %v: one pull, its drop, nothing staged", f.callList())
	}

	g := newFakeFleet(t)
	g.env.RegisterWorkflow(Stage)
	g.imageLack["a"], g.imageLack["b"] = 0, 0
	q := mockPull(g)
	pull.AuthFile = ""
	g.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), Pull: pull})
	if err := g.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if g.count("SendRegistryAuth") != 0 || g.count("DropRegistryAuth") != 0 || len(q.pulls) != 1 || q.pulls[0].Credentials != "" {
		t.Fatalf("anonymous pull: calls %v, pulls %+v", g.callList(), q.pulls)
	}
}
