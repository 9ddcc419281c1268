package contract

import "time"

// Step status values.
const (
	StepPending = "pending"
	StepRunning = "running"
	StepDone    = "done"
	StepFailed  = "failed"
	StepSkipped = "skipped"
)

// Step is one row of a workflow's progress: a pipeline step, possibly on
// one node.
type Step struct {
	Name   string `json:"name"`
	Node   string `json:"node,omitempty"`
	Status string `json:"status"`
	// Started/Ended are workflow time (deterministic).
	Started time.Time `json:"started,omitempty"`
	Ended   time.Time `json:"ended,omitempty"`
	Detail  string    `json:"detail,omitempty"`
	Error   string    `json:"error,omitempty"`
}

// Seconds is the step's duration so far.
func (s Step) Seconds() float64 {
	if s.Started.IsZero() || s.Ended.IsZero() {
		return 0
	}
	return s.Ended.Sub(s.Started).Seconds()
}

// Progress is what ProgressQuery returns.
type Progress struct {
	Workflow string `json:"workflow"`
	Lane     string `json:"lane,omitempty"`
	Steps    []Step `json:"steps"`
	// Children are child workflow IDs (per-node staging) whose pending
	// activities carry byte-level progress in their heartbeats.
	Children []string `json:"children,omitempty"`
	// Waiting are nodes whose worker is gone and that the run waits for,
	// within its outage budget.
	Waiting []NodeWait `json:"waiting,omitempty"`
}

// NodeWait is a node a run waits for, and since when.
type NodeWait struct {
	Node  string    `json:"node"`
	Since time.Time `json:"since"`
}

// StepWaiting marks a step waiting for its node to come back.
const StepWaiting = "waiting"
