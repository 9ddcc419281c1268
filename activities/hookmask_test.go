package activities

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
)

// before_serve hooks run with the node worker's environment, where
// env_from's env: sources live. What they print reaches the history (the
// result's outputs, a failed hook's error), so the values of variables
// whose names look secret are masked there; other values are kept.
func TestBeforeServeMasksSecretLookingEnvInHookOutput(t *testing.T) {
	const secret = "hf_hook_secret_5521"
	t.Setenv("NODE_HF_TOKEN", secret)
	t.Setenv("NODE_PLAIN_SETTING", "plain-value-8813")
	a := &NodeActivities{Node: config.Node{Name: "n1", FSRoot: t.TempDir(), Roots: []string{"/srv"}}}
	ctx := context.Background()
	in := contract.BeforeServeInput{Lane: "l", Hooks: contract.Hooks{
		BeforeServe: []string{`echo "token=$NODE_HF_TOKEN plain=$NODE_PLAIN_SETTING"`},
		Timeout:     contract.Duration(time.Minute),
	}}
	res, err := a.BeforeServe(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 1 || strings.TrimSpace(res.Outputs[0].Output) != "token=*** plain=plain-value-8813" {
		t.Errorf("hook outputs %+v, want the token masked and the plain value kept", res.Outputs)
	}

	in.Hooks.BeforeServe = []string{`echo "about to fail with $NODE_HF_TOKEN"; exit 3`}
	res, err = a.BeforeServe(ctx, in)
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "about to fail with ***") || !strings.Contains(err.Error(), "exited 3") {
		t.Errorf("failing hook: %v; want its output tail quoted with the token masked", err)
	}
	if len(res.Outputs) != 1 || strings.Contains(res.Outputs[0].Output, secret) {
		t.Errorf("failing hook outputs %+v", res.Outputs)
	}
}
