// Package ranklogs reads the logs of a lane's rank containers from a
// node's Docker, each line prefixed with its node and rank and the lane's
// secret values masked: `starter logs` (the client, over each node's
// socket) and the serve engine (the last lines of a rank that died) read
// them alike. It knows containers only by their labels (internal/contract).
//
// It must not import Temporal, activities, workflows or the serve engine
// (serve imports it).
package ranklogs
