package cli

import (
	"sort"
	"strings"

	"github.com/sparklane/sparklane/internal/config"
)

// LaneColumns are the headers of FormatLanes' rows.
var LaneColumns = []string{"NAME", "ALIASES", "CLUSTER", "RUNTIME", "STAGING"}

// FormatLanes gives `starter lanes` one row per recipe, sorted by name:
// name, aliases, cluster, runtime, staging blocks (kind:id).
func FormatLanes(recipes []*config.Recipe) [][]string {
	sorted := append([]*config.Recipe(nil), recipes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var rows [][]string
	for _, r := range sorted {
		var blocks []string
		for _, s := range r.Staging {
			b := s.Kind
			if s.ID != "" {
				b += ":" + s.ID
			}
			blocks = append(blocks, b)
		}
		cluster := r.Cluster
		if cluster == "" {
			cluster = "-"
		}
		aliases := strings.Join(r.Aliases, ",")
		if aliases == "" {
			aliases = "-"
		}
		st := strings.Join(blocks, ", ")
		if st == "" {
			st = "-"
		}
		rows = append(rows, []string{r.Name, aliases, cluster, r.Runtime, st})
	}
	return rows
}
