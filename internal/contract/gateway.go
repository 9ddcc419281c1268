package contract

import "time"

// The front door (internal/gateway, `worker gateway`): one OpenAI-compatible
// address for every lane. The workflows own its route table: a cutover, up,
// stop and the keeper call the gateway's activities (on its task queue) as
// named steps, so every change of what clients reach is in a run's history.

// GatewayQueue is the task queue of gateway name ("": the one gateway of
// a config's [gateway]; "gateway.NAME" for one of [[gateways]]).
func GatewayQueue(name string) string {
	if name == "" {
		return "gateway"
	}
	return "gateway." + name
}

// Gateway route states: what a request for one of the route's names meets.
const (
	// GatewayServing: forwarded to the lane's head.
	GatewayServing = "serving"
	// GatewayHeld: waiting (up to hold_timeout, max_held) until the
	// workflow releases the route: a switch, a heal, a power-on.
	GatewayHeld = "held"
	// GatewayDraining: the lane gets nothing new (new requests are held)
	// while its requests in flight finish, before it stops.
	GatewayDraining = "draining"
	// GatewayOff: the cluster is off by schedule: 503 with Retry-After
	// (or, with [gateway] wake, its power-on starts and the request is held).
	GatewayOff = "off"
	// GatewayDown: the lane is down and nothing brings it back by itself
	// (a crash loop, a cutover whose rollback failed): 503 with
	// Retry-After at once, and never woken.
	GatewayDown = "down"
)

// GatewayNames are the names clients reach a lane by: its served name,
// then the recipe's [gateway] aliases, each once, in that order.
func GatewayNames(served string, aliases []string) []string {
	var out []string
	for _, n := range append([]string{served}, aliases...) {
		dup := n == ""
		for _, o := range out {
			dup = dup || o == n
		}
		if !dup {
			out = append(out, n)
		}
	}
	return out
}

// GatewayRoute is one cluster's entry in a gateway's table: the lane it
// serves and the names clients reach it by.
type GatewayRoute struct {
	Cluster string `json:"cluster"`
	Lane    string `json:"lane"`
	// BaseURL is the lane's head (http://ADDRESS:PORT).
	BaseURL string `json:"base_url"`
	// Served is the model name the engine serves (what requests are
	// rewritten to); Names are every name clients may ask for (Served
	// and the recipe's [gateway] aliases).
	Served string   `json:"served"`
	Names  []string `json:"names"`
	// Nodes are the lane's nodes (what a wake powers on).
	Nodes []string `json:"nodes,omitempty"`
	State string   `json:"state"`
	// ETA is how long the workflow expects a hold to last (the lane's last
	// cold-ready time): the Retry-After of a request past the hold's bounds.
	ETA Duration `json:"eta,omitempty"`
	// Why says what holds, drains or turned the route off.
	Why string `json:"why,omitempty"`
	// Held is how many requests wait on the route now (a status figure).
	Held int `json:"held,omitempty"`
}

// GatewayHoldInput holds new requests for a cluster's names: they wait
// until Release (or their bounds). ETA is the expected wait.
type GatewayHoldInput struct {
	Cluster string `json:"cluster"`
	// Lane is the lane expected next (the new lane of a cutover, the
	// healed one): its last recorded ready time, when the gateway has
	// one, is the hold's ETA; else ETA (0: unknown).
	Lane string   `json:"lane,omitempty"`
	ETA  Duration `json:"eta,omitempty"`
	Why  string   `json:"why,omitempty"`
}

// GatewayRouteInput points a cluster's names at a lane (its state kept:
// a held route stays held until Release).
type GatewayRouteInput struct {
	Route GatewayRoute `json:"route"`
}

// GatewayReleaseInput sends a cluster's held requests, and every new one,
// to its route.
type GatewayReleaseInput struct {
	Cluster string `json:"cluster"`
}

// GatewayDrainInput drains a lane before it stops: new requests for its
// names are held, and those in flight (streams included) get up to
// Timeout (0: the gateway's drain_timeout) to finish. It drains every
// route serving Lane, or with Lane empty every route on one of Nodes (a
// power-off).
type GatewayDrainInput struct {
	Cluster string   `json:"cluster"`
	Lane    string   `json:"lane"`
	Nodes   []string `json:"nodes,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
}

// GatewayDrainResult counts a drain: the requests in flight when it began,
// those that finished within the timeout and those cut off after it.
type GatewayDrainResult struct {
	Gateway  string  `json:"gateway"`
	Lane     string  `json:"lane"`
	InFlight int     `json:"in_flight"`
	Finished int     `json:"finished"`
	CutOff   int     `json:"cut_off,omitempty"`
	Seconds  float64 `json:"seconds"`
}

// GatewayUnrouteInput removes a cluster's route (its lane stopped by
// hand): its names answer 404, listing the names served.
type GatewayUnrouteInput struct {
	Cluster string `json:"cluster"`
	// Lane, with Cluster empty, removes every route serving it (a stop
	// names a lane, not a cluster).
	Lane string `json:"lane,omitempty"`
}

// GatewayOffInput marks a cluster off by schedule: its names answer 503
// with Retry-After (or wake it, with [gateway] wake).
type GatewayOffInput struct {
	Cluster string `json:"cluster"`
	// With Cluster empty, Lane selects every route serving it (a failed
	// stop), else Nodes every route on one of them (a power-off).
	Lane  string   `json:"lane,omitempty"`
	Nodes []string `json:"nodes,omitempty"`
	Why   string   `json:"why,omitempty"`
	// Down marks the lane down instead (GatewayDown): 503 at once, no wake.
	Down bool `json:"down,omitempty"`
	// ETA is when the cluster is expected back (0: unknown).
	ETA Duration `json:"eta,omitempty"`
}

// GatewayStepResult is what a gateway step left: the gateway's name and
// the cluster's route after it (a step by lane or nodes: the first route
// it changed; Changed counts them).
type GatewayStepResult struct {
	Gateway string        `json:"gateway"`
	Route   *GatewayRoute `json:"route,omitempty"`
	Changed int           `json:"changed,omitempty"`
}

// GatewayTableFile is a gateway's route table as it keeps it on disk
// (lane.GatewayStateFile), written atomically on every change and, while
// requests wait, with their count refreshed: the gateway routes from it
// after a restart, and `starter gateway routes` and status read it.
type GatewayTableFile struct {
	Gateway string         `json:"gateway"`
	Routes  []GatewayRoute `json:"routes"`
	// Written is when the file was written (its Held figures are as of then).
	Written time.Time `json:"written,omitempty"`
	// Ready is each lane's last ready time as its routes gave it (the
	// ETA of a hold for that lane).
	Ready map[string]Duration `json:"ready,omitempty"`
}
