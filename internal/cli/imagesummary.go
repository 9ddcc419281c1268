package cli

import (
	"fmt"
	"strings"

	"github.com/sparklane/sparklane/internal/contract"
)

// imageMoved is the summary of a stage's image step, a line per image:
// where it came from when no node had it (pulled, built), the bytes that
// moved node to node in all and per hop (upstream → node, with layers),
// and the nodes that had it before the move. None when the step did not run.
func imageMoved(images []contract.ImageNodeResult, pulled *contract.PullImageResult, built *contract.BuildImageResult) []string {
	var order []contract.ImageRef
	by := map[contract.ImageRef][]contract.ImageNodeResult{}
	for _, im := range images {
		if _, ok := by[im.Image]; !ok {
			order = append(order, im.Image)
		}
		by[im.Image] = append(by[im.Image], im)
	}
	var lines []string
	for _, ref := range order {
		var total int64
		var hops, had, other []string
		for _, im := range by[ref] {
			switch {
			case im.From != "" || im.BytesIn > 0:
				total += im.BytesIn
				hops = append(hops, fmt.Sprintf("%s → %s %s, %d layers", firstNonEmpty(im.From, "?"), im.Node, contract.HumanBytes(im.BytesIn), im.Layers))
			case strings.HasPrefix(im.State, "present"):
				had = append(had, im.Node)
			default:
				other = append(other, im.Node+" "+im.State)
			}
		}
		line := ref.String() + ": "
		if pulled != nil {
			line += fmt.Sprintf("pulled from %s on %s; ", pulled.From, pulled.Node)
		}
		if built != nil {
			line += "built on " + built.Node + "; "
		}
		line += contract.HumanBytes(total) + " moved node to node"
		if len(hops) > 0 {
			line += " (" + strings.Join(hops, "; ") + ")"
		}
		if len(had) > 0 {
			line += "; present on " + strings.Join(had, ", ")
		}
		if len(other) > 0 {
			line += "; " + strings.Join(other, "; ")
		}
		lines = append(lines, line)
	}
	return lines
}
