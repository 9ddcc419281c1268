package cli

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
)

// knownNodes checks that every node in want (--node) is one of cfg's, and
// lists all of cfg's nodes.
func knownNodes(cfg *config.Config, want []string) ([]string, error) {
	all := allNodes(cfg)
	for _, n := range want {
		if !slices.Contains(all, n) {
			return nil, fmt.Errorf("--node %s: no such node in %s (nodes: %s)", n, cfg.File, strings.Join(all, ", "))
		}
	}
	return all, nil
}

// resolveName is the name of the lane (or alias) lane among rs.
func resolveName(rs []*config.Recipe, lane string) (string, error) {
	r, err := config.Resolve(rs, lane)
	if err != nil {
		return "", err
	}
	return r.Name, nil
}
