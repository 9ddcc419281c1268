package contract

// A lane's containers and probes as they travel: the same JSON as
// internal/engine/serve's and probe's types, owned here.

// ForeignContainer is a running container sparklane did not start that
// holds a GPU or a lane's port.
type ForeignContainer struct {
	Name  string `json:"name"`
	ID    string `json:"id"`
	Image string `json:"image"`
	// Why says what it holds: "GPUs", "port 8000".
	Why string `json:"why"`
}

// String is "NAME (WHY)".
func (f ForeignContainer) String() string { return f.Name + " (" + f.Why + ")" }

// ClearedPath is one path a before_serve clear emptied.
type ClearedPath struct {
	Path string `json:"path"`
	// Files and Bytes count the non-directory entries removed.
	Files int64 `json:"files"`
	Bytes int64 `json:"bytes"`
	// Absent says the path did not exist: nothing was removed.
	Absent bool `json:"absent,omitempty"`
	// Helper says the node's clear helper removed it (the worker user could not).
	Helper bool `json:"helper,omitempty"`
	// Incomplete says some directories could not be read, so Files and
	// Bytes undercount.
	Incomplete bool `json:"incomplete,omitempty"`
}

// PoolProbe is a pooling model's probe (embeddings, rerank).
type PoolProbe struct {
	// Endpoint is the route probed (/v1/embeddings, /v1/rerank, /rerank).
	Endpoint string `json:"endpoint"`
	// Seconds is the request's round trip.
	Seconds float64 `json:"seconds"`
	// Dim is the embedding length; Results the number of scored documents.
	Dim     int `json:"dim,omitempty"`
	Results int `json:"results,omitempty"`
}
