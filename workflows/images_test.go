package workflows

import (
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// Stage ensures the image first: b and c lack it (b has one of its two
// layers, c none), so a sends to b, b forwards to c, and the stream starts
// at the first layer c lacks; every node's result says what it got.
func TestStageMovesTheImageThroughAChain(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.imageLack["b"], f.imageLack["c"] = 1, 0
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b", "c"), Blocks: testBlocks()})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res contract.StageResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	a, b, c := f.imageSent["a"], f.imageSent["b"], f.imageSent["c"]
	if a.Upstream != "" || a.Downstream != "b" || b.Upstream != "a" || b.UpstreamAddr != "a:7291" || b.Downstream != "c" || c.Upstream != "b" || c.Downstream != "" {
		t.Fatalf("chain: a %+v, b %+v, c %+v", a, b, c)
	}
	if a.Spec.From != 0 || a.Spec.Tag != "img-new" || b.Have != 1 || len(a.Spec.DiffIDs) != 2 {
		t.Fatalf("spec %+v, have %d", a.Spec, b.Have)
	}
	calls := f.callList()
	if !strings.HasPrefix(calls[0], "TransferImage") || !strings.HasPrefix(calls[2], "TransferImage") {
		t.Fatalf("the image moves before any block is staged: %v", calls)
	}
	if len(res.Images) != 3 || !strings.HasPrefix(res.Images[0].State, "present") || res.Images[1].From != "a" || res.Images[2].From != "b" || res.Images[2].BytesIn != 1000 {
		t.Fatalf("images %+v", res.Images)
	}
}

// c's worker stops mid-transfer with the first layer loaded (the receiver
// keeps it, images/durable.go): the next round asks again, b now has the
// image, and the stream to c starts above the layer it kept.
func TestStageImageResumesAboveTheLayersANodeKept(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.imageLack["b"], f.imageLack["c"] = 0, 0
	f.imageFail["c"], f.imageResume = 1, true
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b", "c"), Blocks: testBlocks()})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	c := f.imageSent["c"]
	if c.Upstream != "a" || c.Spec.From != 1 || c.Have != 1 {
		t.Fatalf("second round to c: %+v, want from a, from layer 2, having 1", c)
	}
	if n := strings.Count(strings.Join(f.callList(), "\n"), "TransferImage"); n != 5 {
		t.Fatalf("%d TransferImage calls, want 3 then 2", n)
	}
}

// A dry run says per node what would move and moves nothing; an image on
// no node fails a real stage naming the nodes and the ways to provide it.
func TestStageImageDryRunAndMissingEverywhere(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.imageLack["b"] = 1
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), DryRun: true})
	var res contract.StageResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if f.count("TransferImage") != 0 || len(res.Images) != 2 || res.Images[1].State != "missing: has 1 of 2 layers, 1 would move" || res.Images[1].From != "a" {
		t.Fatalf("dry run: images %+v, calls %v", res.Images, f.callList())
	}

	g := newFakeFleet(t)
	g.env.RegisterWorkflow(Stage)
	g.imageLack["a"], g.imageLack["b"] = 0, 0
	g.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks()})
	err := g.env.GetWorkflowError()
	if err == nil || errType(err) != fault.ImageMissing || !strings.Contains(err.Error(), "missing on a, b") {
		t.Fatalf("image nowhere: %v", err)
	}
	if g.count("StageBlock") != 0 {
		t.Fatalf("staged without the image: %v", g.callList())
	}
}

// stage --node b asks only b when b has the image: the other nodes'
// workers (which may be down) are asked only for a node that lacks it.
func TestStageOnlyAsksTheOtherNodesWhenItsNodeLacksTheImage(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b", "c"), Blocks: testBlocks(), Only: "b"})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if f.imageAsked["a"] != 0 || f.imageAsked["c"] != 0 || f.imageAsked["b"] != 1 || f.count("TransferImage") != 0 {
		t.Fatalf("b has the image: asked %v, calls %v", f.imageAsked, f.callList())
	}

	g := newFakeFleet(t)
	g.env.RegisterWorkflow(Stage)
	g.imageLack["b"] = 0
	g.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b", "c"), Blocks: testBlocks(), Only: "b"})
	if err := g.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if g.imageAsked["a"] != 1 || g.imageAsked["c"] != 1 || g.imageSent["b"].Upstream == "" {
		t.Fatalf("b lacks the image: asked %v, sent %v", g.imageAsked, g.imageSent)
	}
}

// A lane with [build] whose image is on no node: the dry run says where
// it would be built; the stage builds it there, then moves it to the
// other nodes, and only then stages; starter image build (Force,
// ImageOnly) builds even when a node has it and stages nothing.
func TestStageBuildsAnImageOnNoNodeThenMovesIt(t *testing.T) {
	build := &contract.ImageBuild{Image: contract.MustImageRef("img-new"), Spec: contract.Build{Context: "/nas/e1"}, Node: "a"}
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.imageLack["a"], f.imageLack["b"] = 0, 0
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), DryRun: true, Build: build})
	var res contract.StageResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if f.count("BuildImage") != 0 || len(res.Images) != 2 || !strings.HasSuffix(res.Images[1].State, "would be built on a and moved from there") {
		t.Fatalf("dry run: %+v, calls %v", res.Images, f.callList())
	}

	g := newFakeFleet(t)
	g.env.RegisterWorkflow(Stage)
	g.imageLack["a"], g.imageLack["b"] = 0, 0
	g.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), Build: build})
	res = contract.StageResult{}
	if err := g.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Built == nil || res.Built.Node != "a" || g.imageSent["b"].Upstream != "a" {
		t.Fatalf("built %+v, b received %+v, calls %v", res.Built, g.imageSent["b"], g.callList())
	}
	if calls := g.callList(); len(calls) < 3 || calls[0] != "BuildImage img-new@a" || !strings.HasPrefix(calls[1], "TransferImage") || !strings.HasPrefix(calls[2], "TransferImage") || g.count("StageBlock") != 4 {
		t.Errorf("calls %v, want the build, then the transfer, then the blocks", calls)
	}

	// A rebuild of the same tag: b still has the previous build under it,
	// so b receives the new one from a (only the layer it lacks).
	h := newFakeFleet(t)
	h.env.RegisterWorkflow(Stage)
	h.imageStale["a"], h.imageStale["b"] = true, true
	force := *build
	force.Force = true
	h.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks(), Build: &force, ImageOnly: true})
	if err := h.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if h.count("BuildImage") != 1 || h.count("StageBlock") != 0 || h.imageSent["b"].Upstream != "a" || h.imageSent["b"].Spec.From != 1 {
		t.Fatalf("image build: calls %v, b got %+v; want one build, b receiving the new image's top layer from a, no block staged", h.callList(), h.imageSent["b"])
	}
}

// An image pinned by a digest given in part renders (the lane lists and
// its dry run shows) but no run moves or starts it: the image step fails
// before it asks any node, saying how many digits the pin has.
func TestStageRefusesAnIncompletePin(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	p := testPlan("new", "h", "a", "b")
	for i := range p.Nodes {
		p.Nodes[i].Image = contract.MustImageRef("img-new:1@sha256:3dbc3130")
	}
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: p, Blocks: testBlocks()})
	err := f.env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "has 8 of 64 hex digits") || errType(err) != fault.InvalidSpec {
		t.Fatalf("stage of an incomplete pin: %v, want InvalidSpec naming the digits", err)
	}
	if n := strings.Count(strings.Join(f.callList(), "\n"), "ImageInventory"); n != 0 {
		t.Fatalf("%d inventories asked of an incomplete pin, want none", n)
	}
}

// A node whose worker is gone when the image step asks it (a reboot) is
// waited for within the outage budget, as staging waits, and the stage
// completes once it is back.
func TestImageStepWaitsForAGoneNode(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.imageLack["c"] = 0
	f.gone["c"] = 2 // its first two calls meet no worker
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b", "c"), Blocks: testBlocks()})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("stage with c rebooting: %v", err)
	}
	if f.imageAsked["c"] < 2 || f.imageSent["c"].Upstream == "" {
		t.Fatalf("c asked %d times, sent %+v: want it waited for, asked again and sent the image", f.imageAsked["c"], f.imageSent["c"])
	}
}

// A node whose Docker does not answer (DockerUnreachable) is waited for
// too: its worker polls, its daemon is restarting.
func TestImageStepWaitsForANodesDocker(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.imageLack["b"] = 0
	f.dockerDown["b"] = 5
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks()})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("stage with b's Docker restarting: %v", err)
	}
	if f.dockerDown["b"] != 0 || f.imageSent["b"].Upstream != "a" {
		t.Fatalf("b's Docker down %d more times, sent %+v: want it waited for and the image sent", f.dockerDown["b"], f.imageSent["b"])
	}
}

// A receiver whose node goes away mid-stream, more times than a failed
// transfer may be planned again, costs no transfer round: each time the
// next inventory waits for it, and the stream resumes above the layers it
// kept (images/durable.go).
func TestImageTransferOutagesDoNotCountAsRounds(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.imageLack["b"] = 0
	f.imageGoneMid["b"] = imageRounds + 1
	f.imageResume = true
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks()})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("stage with b gone %d times mid-stream: %v", imageRounds+1, err)
	}
	if last := f.imageSent["b"]; last.Spec.From != 1 || last.Have != 1 {
		t.Fatalf("last stream to b %+v: want it to start above the layer b kept", last)
	}
	if n := f.count("TransferImage img-new@b"); n != imageRounds+2 {
		t.Fatalf("%d transfers to b, want %d (every outage, then the one that finished)", n, imageRounds+2)
	}
}

// Once the node the image step waited for is back, the progress no longer
// lists it as waited for: the image step's round is one step for every
// node (it names none), and the wait is the node's.
func TestImageStepWaitEndsWithTheNodeBack(t *testing.T) {
	f := newFakeFleet(t)
	f.env.RegisterWorkflow(Stage)
	f.imageLack["b"] = 0
	f.dockerDown["b"] = 5
	f.env.ExecuteWorkflow(Stage, contract.StageInput{Plan: testPlan("new", "h", "a", "b"), Blocks: testBlocks()})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("stage with b's Docker restarting: %v", err)
	}
	v, err := f.env.QueryWorkflow(contract.ProgressQuery)
	if err != nil {
		t.Fatal(err)
	}
	var p contract.Progress
	if err := v.Get(&p); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Steps {
		if s.Status == contract.StepWaiting {
			t.Errorf("step %+v still waiting after the stage completed", s)
		}
	}
	if len(p.Waiting) != 0 {
		t.Errorf("progress after b came back still lists nodes waited for: %+v", p.Waiting)
	}
}
