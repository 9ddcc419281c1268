package activities

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// The node worker resolves a plan's env_from on its own node — a variable
// of its environment, a file beneath its fs_root — over the plan's env,
// and masks the values in the rank logs it returns for that lane only. A
// missing source is a permanent error naming it, never echoing a value.
func TestContainerEnvResolvesOnTheNodeAndMasksLogs(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc", "sparklane"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "sparklane", "api_key"), []byte("sk-file-value-77\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &NodeActivities{
		Node:   config.Node{Name: "n1", FSRoot: root, Roots: []string{"/srv"}},
		Getenv: func(k string) string { return map[string]string{"NODE_HF_TOKEN": "hf_env_value_42"}[k] },
	}
	in := contract.StartRankInput{Lane: "l", Plan: contract.NodePlan{
		Env:     map[string]string{"SIM_LANE": "l"},
		EnvFrom: map[string]string{"HF_TOKEN": "env:NODE_HF_TOKEN", "API_KEY": "file:/etc/sparklane/api_key"},
	}}
	env, err := a.containerEnv(in, map[string]string{"SIM_LANE": "l", "ROWS": "3"})
	if err != nil {
		t.Fatal(err)
	}
	if env["HF_TOKEN"] != "hf_env_value_42" || env["API_KEY"] != "sk-file-value-77" || env["SIM_LANE"] != "l" || env["ROWS"] != "3" {
		t.Errorf("container env %v", env)
	}
	if _, ok := in.Plan.Env["HF_TOKEN"]; ok {
		t.Error("the plan's env was written to")
	}
	logs := a.mask("l", []string{"boot with token hf_env_value_42", "key=sk-file-value-77 ok"})
	if strings.Contains(strings.Join(logs, "\n"), "value") || !strings.Contains(logs[0], "***") {
		t.Errorf("masked logs %q", logs)
	}
	if other := a.mask("other", []string{"hf_env_value_42"}); other[0] != "hf_env_value_42" {
		t.Errorf("another lane's logs were masked with this lane's secrets: %q", other)
	}

	a.Getenv = func(string) string { return "" }
	_, err = a.containerEnv(in, nil)
	if typ, ok := fault.TypeOf(err); err == nil || !ok || typ != fault.InvalidSpec || !strings.Contains(err.Error(), "env_from.HF_TOKEN: NODE_HF_TOKEN is not set") {
		t.Errorf("missing variable: %v", err)
	}
}
