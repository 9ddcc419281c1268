package contract

// PowerStepInput names a node or [[devices]] entry; its power settings are
// read from the config here, so no token ever enters a workflow input.
type PowerStepInput struct {
	Target   string   `json:"target"`
	Timeout  Duration `json:"timeout,omitempty"`
	Bound    Duration `json:"bound,omitempty"`
	Interval Duration `json:"interval,omitempty"`
}

// PowerStepResult is one step's outcome, in words for the UI.
type PowerStepResult struct {
	Target  string `json:"target"`
	Step    string `json:"step"`
	Skipped bool   `json:"skipped,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// PowerInput switches nodes and devices on or off. Only names travel here:
// the activities read relay entities and token sources from the config.
type PowerInput struct {
	Action  string   `json:"action"`
	Targets []string `json:"targets"`
	// Force cuts the relay even when a device still answers after its
	// graceful shutdown (it would otherwise boot back or lose data).
	Force bool `json:"force,omitempty"`
	// WaitBound caps waiting for a target to go down or come up.
	WaitBound Duration `json:"wait_bound,omitempty"`
	// Gear is network gear (switches) to power off after the targets,
	// never before the nodes behind it: each goes off only once every
	// node behind it is off — a target of this run that reached off, or
	// another node that no longer answers. Gear steps (API shutdown, wait,
	// relay) only warn: the nodes are already down safely.
	Gear []PowerGear `json:"gear,omitempty"`
	// Gateways are the task queues of the gateways that front the
	// fleet (contract.GatewayQueue): a power-off drains the routes on its
	// targets and marks them off by schedule first (behind versionGateway).
	// None: no gateway step.
	Gateways []string `json:"gateways,omitempty"`
}

// PowerGear is one piece of network gear and the nodes behind it
// ([[devices]] behind).
type PowerGear struct {
	Name   string   `json:"name"`
	Behind []string `json:"behind,omitempty"`
}

// PowerTargetResult is one target's outcome.
type PowerTargetResult struct {
	Target   string            `json:"target"`
	State    string            `json:"state"`
	Steps    []PowerStepResult `json:"steps"`
	Warnings []string          `json:"warnings,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// PowerResult lists every target.
type PowerResult struct {
	Action  string              `json:"action"`
	Targets []PowerTargetResult `json:"targets"`
	// Drained are the gateways' drains before a power-off.
	Drained []GatewayDrainResult `json:"drained,omitempty"`
}

// Power actions.
const (
	PowerOn  = "on"
	PowerOff = "off"
)
