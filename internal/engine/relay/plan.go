package relay

import (
	"fmt"
	"sort"
)

// FileRef is what planning needs of one file.
type FileRef struct {
	// Rel is the file's mirror-relative path: the same on every node.
	Rel string
	// Size is its size on the NAS.
	Size int64
}

// Route is how one node gets one file.
type Route struct {
	// Source is the peer node the file is fetched from; empty means the
	// NAS.
	Source string
	// Hop is the node's place in the file's chain: 0 reads the NAS, 1
	// fetches from hop 0, and so on. Nodes work through their files in
	// hop order, so a peer is never waited on by a file it has not
	// reached for lack of workers.
	Hop int
}

// Plan says for each file which node reads it from the NAS and, for every
// other node, which peer it comes from. It is a pure function of the node
// list and the files, so every node computes the same plan from the same
// NAS listing and nothing of it travels through workflow history.
type Plan struct {
	// Nodes are the nodes staging the block, in cluster order.
	Nodes []string
	// Reader is the NAS reader of each file, by Rel.
	Reader map[string]string
	// ReaderBytes is how many bytes each node reads from the NAS by plan.
	ReaderBytes map[string]int64
	index       map[string]int
}

// NewPlan spreads files over nodes by bytes (largest first, to the node
// with the fewest bytes so far; ties to the earlier node), so each node
// reads about 1/len(nodes) of the block from the NAS.
func NewPlan(nodes []string, files []FileRef) (*Plan, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("relay plan: no nodes")
	}
	p := &Plan{Nodes: append([]string(nil), nodes...), Reader: map[string]string{}, ReaderBytes: map[string]int64{}, index: map[string]int{}}
	for i, n := range nodes {
		if _, dup := p.index[n]; dup || n == "" {
			return nil, fmt.Errorf("relay plan: node %q is empty or listed twice in %v", n, nodes)
		}
		p.index[n] = i
		p.ReaderBytes[n] = 0
	}
	fs := append([]FileRef(nil), files...)
	sort.Slice(fs, func(i, j int) bool {
		if fs[i].Size != fs[j].Size {
			return fs[i].Size > fs[j].Size
		}
		return fs[i].Rel < fs[j].Rel
	})
	for _, f := range fs {
		if _, dup := p.Reader[f.Rel]; dup {
			return nil, fmt.Errorf("relay plan: file %s listed twice", f.Rel)
		}
		best := nodes[0]
		for _, n := range nodes[1:] {
			if p.ReaderBytes[n] < p.ReaderBytes[best] {
				best = n
			}
		}
		p.Reader[f.Rel] = best
		p.ReaderBytes[best] += f.Size
	}
	return p, nil
}

// Route is node's route for the file rel: the chain starts at the file's
// reader and follows the cluster order round, so every node forwards about
// as many bytes as it reads. An unplanned file or node reads the NAS.
func (p *Plan) Route(rel, node string) Route {
	r, ok := p.Reader[rel]
	i, in := p.index[node]
	if !ok || !in {
		return Route{}
	}
	n := len(p.Nodes)
	hop := (i - p.index[r] + n) % n
	if hop == 0 {
		return Route{Hop: 0}
	}
	return Route{Source: p.Nodes[(i-1+n)%n], Hop: hop}
}
