package lane

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/imagespec"
)

// wireBuild is the recipe's [build], or what sparkrun's build keys map
// onto: builder "docker" (or none) with builder_config's context,
// dockerfile, git (or repo) and ref (or branch, tag), and build_args (a
// map, or a list of KEY=VALUE). Nil when the recipe says neither.
func wireBuild(r *config.Recipe) *contract.Build {
	if b := contract.Build(r.Build); b.Context != "" || b.Git != "" || b.Ref != "" || b.Dockerfile != "" || len(b.Args) > 0 || b.Node != "" {
		return &b
	}
	if r.Builder != "" && r.Builder != "docker" || r.BuilderConfig == nil {
		return nil
	}
	str := func(keys ...string) string {
		for _, k := range keys {
			if s, ok := r.BuilderConfig[k].(string); ok && s != "" {
				return s
			}
		}
		return ""
	}
	b := contract.Build{Context: str("context"), Dockerfile: str("dockerfile"), Git: str("git", "repo"), Ref: str("ref", "branch", "tag"), Node: str("node")}
	if b.Context == "" && b.Git == "" {
		return nil
	}
	switch a := r.BuildArgs.(type) {
	case map[string]any:
		b.Args = map[string]string{}
		for k, v := range a {
			b.Args[k] = fmt.Sprint(v)
		}
	case []any:
		b.Args = map[string]string{}
		for _, kv := range a {
			k, v, _ := strings.Cut(fmt.Sprint(kv), "=")
			b.Args[k] = v
		}
	}
	return &b
}

// buildWarnings: sparkrun's build keys that do not map onto [build] are
// recorded only.
func buildWarnings(r *config.Recipe, b *contract.Build) []string {
	if b != nil || (r.BuildArgs == nil && r.Builder == "" && r.BuilderConfig == nil) {
		return nil
	}
	return []string{fmt.Sprintf("%s: build_args: recorded (builder %q): sparklane builds no image from it (only builder docker with builder_config context or git maps onto [build]); %s must already be on a node, or give the recipe a [build]", r.File, r.Builder, r.Image)}
}

// checkBuild refuses a [build] sparklane could not run, before any run
// starts: the file, the key and the fix.
func checkBuild(cfg *config.Config, r *config.Recipe, plan *contract.LanePlan, b *contract.Build) error {
	if b == nil {
		return nil
	}
	if err := imagespec.CheckBuild(*b, cfg.SharedRoots); err != nil {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: %w", r.File, err))
	}
	if ref, err := contract.ParseImageRef(r.Image); err != nil {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: [build] needs image to tag the result: %w", r.File, err))
	} else if ref.Digest != "" {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: [build] with a pinned image %s: a built image has no repo digest to match the pin; drop the @%s pin or the [build]", r.File, r.Image, ref.Digest))
	}
	nodes := make([]string, len(plan.Nodes))
	for i, n := range plan.Nodes {
		nodes[i] = n.Node
	}
	if b.Node != "" && !slices.Contains(nodes, b.Node) {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: [build] node %s is not one of the lane's nodes on cluster %s (%s): name one of them, or drop the key (the head builds)", r.File, b.Node, plan.Cluster, strings.Join(nodes, ", ")))
	}
	return nil
}

// BuildNode is the node that builds the lane's image: only (--node) when
