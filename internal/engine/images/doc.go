// Package images puts a lane's engine image on every node of its cluster,
// moving between nodes only the layers a node lacks: the image's identity
// (its ID, and the repo digest a recipe pins), a node's inventory (whether
// it has the image, and how many of its layers), the plan (one source node,
// the others in a chain), and the transfer itself — the source's `docker
// save` with the layers the chain has left out, verified by every receiver
// (config against the image ID, each layer against its diffID) as it is
// teed into the receiver's `docker load` and on to the next node, over
// mutually authenticated TLS bound only while the transfer runs. An
// image on no node is pulled into one node's Docker by sparklane's own
// registry client (Pull: go-containerregistry, so no node's Docker needs
// registry configuration), with a login that reaches the node as a
// one-pull file (credentials.go), then moved like any image.
//
// It relies on the classic (graphdriver) image store's `docker load`,
// which skips a layer whose chain ID the daemon already has without
// opening its file (docs/architecture.md says why this and not a
// registry). It knows nothing of Temporal and must not import activities
// or workflows.
package images
