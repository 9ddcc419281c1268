package serve_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/fault"
)

// post_exec in a real container: commands run in order with /bin/sh -c,
// their output (the secrets masked, those the worker holds and those the
// container's label names) is kept, and the first failing one
// stops the rest as a HookFailed error naming it, the container, the node
// and its exit code.
func TestExecHooksInAContainer(t *testing.T) {
	d := dockerClient(t)
	img := shellImage(t, d)
	lane := newLane(t, d)
	ctx := context.Background()
	s := spec(lane, "serve-n1", 0, "h", img, "sleep")
	// HF_TOKEN is a secret only the container's label names (as after a
	// restart of the worker that resolved it): it is masked too.
	s.Env, s.SecretEnv = map[string]string{"HF_TOKEN": "hf_labelled"}, []string{"HF_TOKEN"}
	startRank(t, ctx, d, s)
	ctr := serve.ContainerName(lane, 0)
	in := serve.ExecInput{Node: "serve-n1", Container: ctr, Timeout: time.Minute, Secrets: []string{"s3cret-value"},
		Commands: []string{"echo one > /mark && echo token=s3cret-value hf=$HF_TOKEN", "read x < /mark; echo $x; echo err >&2; exit 4", "echo never"}}
	outs, err := serve.ExecHooks(ctx, d, in)
	if typ, _ := fault.TypeOf(err); typ != fault.HookFailed || !strings.Contains(err.Error(), `post_exec 2 ("read x < /mark; echo $x; echo err >&2; exit 4") in container `+ctr+" on node serve-n1: exited 4") {
		t.Fatalf("failing post_exec: %v (type %q)", err, typ)
	}
	if len(outs) != 2 || outs[0].Exit != 0 || outs[0].Output != "token=*** hf=***\n" || outs[1].Exit != 4 ||
		len(outs[1].Output) != len("one\nerr\n") || !strings.Contains(outs[1].Output, "one\n") || !strings.Contains(outs[1].Output, "err\n") {
		t.Errorf("outputs %+v, want the first two, masked, stdout and stderr both kept", outs)
	}
}
