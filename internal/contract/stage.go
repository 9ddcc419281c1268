package contract

import "encoding/json"

// The staging engines' results and progress as they travel: the same JSON
// as internal/engine/staging's Result, VerifyResult and Progress, owned here
// so an engine's rename never changes a history (activities convert).

// BlockResult is what one staging pass of a block did on a node.
type BlockResult struct {
	CopiedFiles   int     `json:"copied_files"`
	CopiedBytes   int64   `json:"copied_bytes"`
	VerifiedFiles int     `json:"verified_files"`
	AdoptedFiles  int     `json:"adopted_files"`
	SkippedFiles  int     `json:"skipped_files"`
	SkippedBytes  int64   `json:"skipped_bytes,omitempty"`
	Links         int     `json:"links"`
	TotalFiles    int     `json:"total_files"`
	TotalBytes    int64   `json:"total_bytes"`
	Rows          int64   `json:"rows,omitempty"`
	Seconds       float64 `json:"seconds"`
	// DryRun is true when nothing was written; the counts are the plan.
	DryRun bool `json:"dry_run,omitempty"`
	// Exports lists the export trees made (node-local paths).
	Exports []string `json:"exports,omitempty"`
	// ByteSources is set when the block was relayed between nodes.
	ByteSources
	// Relay says how the relay went when it was on.
	Relay *RelayReport `json:"relay,omitempty"`
}

// ByteSources says where a relayed block's bytes came from: the NAS is read
// about once per lane, the peers carry the rest.
type ByteSources struct {
	// FromNAS is the bytes read from the NAS.
	FromNAS int64 `json:"from_nas,omitempty"`
	// FromPeers is the bytes received from each peer node, by name.
	FromPeers map[string]int64 `json:"from_peers,omitempty"`
}

// RelayReport is the relay's account of one node's pass: files refetched
// from the NAS because a peer sent them wrong, and peers given up on.
type RelayReport struct {
	Files        int               `json:"files"`
	Present      int               `json:"present"`
	Refetched    int               `json:"refetched,omitempty"`
	PeerFailures map[string]string `json:"peer_failures,omitempty"`
	Resumed      int64             `json:"resumed,omitempty"`
	// Error is why the relay stopped early, when it did.
	Error string `json:"error,omitempty"`
}

// BlockVerify is a verify-only pass over a staged block.
type BlockVerify struct {
	OK int `json:"ok"`
	// Bad and Missing are the paths at fault; past ListLimit, only the
	// first ListLimit travel (the counts say how many).
	Bad     []string `json:"bad"`
	Missing []string `json:"missing"`
	// BadCount and MissingCount are the full counts when the lists were
	// cut (0: the lists are whole).
	BadCount     int `json:"bad_count,omitempty"`
	MissingCount int `json:"missing_count,omitempty"`
	// ListFile is the file on the node holding the full lists, when cut.
	ListFile string `json:"list_file,omitempty"`
	// Full is true when whole contents were hashed (--full).
	Full bool `json:"full"`
}

// ListLimit is how many paths of each list a BlockVerify carries through
// Temporal: enough to act on, small enough that 20,000 bad files cost a
// few kilobytes of history.
const ListLimit = 20

// Clean reports whether nothing is bad or missing.
func (v BlockVerify) Clean() bool { return v.NBad() == 0 && v.NMissing() == 0 }

// NBad is how many paths are bad, whether or not the list was cut.
func (v BlockVerify) NBad() int { return max(v.BadCount, len(v.Bad)) }

// NMissing is how many paths are missing, whether or not the list was cut.
func (v BlockVerify) NMissing() int { return max(v.MissingCount, len(v.Missing)) }

// MarshalJSON cuts each list to ListLimit paths and records the full
// counts, so no code path can put an unbounded list into a payload. It is
// pure (no I/O): workflows marshal it too.
func (v BlockVerify) MarshalJSON() ([]byte, error) {
	type plain BlockVerify
	p := plain(v)
	if len(p.Bad) > ListLimit {
		p.BadCount, p.Bad = max(p.BadCount, len(p.Bad)), p.Bad[:ListLimit]
	}
	if len(p.Missing) > ListLimit {
		p.MissingCount, p.Missing = max(p.MissingCount, len(p.Missing)), p.Missing[:ListLimit]
	}
	return json.Marshal(p)
}

// StageProgress is a staging pass's heartbeat: what the starter's progress
// bars show and where a retried pass resumes.
type StageProgress struct {
	FilesTotal int   `json:"files_total"`
	FilesDone  int   `json:"files_done"`
	BytesTotal int64 `json:"bytes_total"`
	BytesDone  int64 `json:"bytes_done"`
	// InFlight are files being copied and the offset up to which their temp
	// file is complete and fsynced.
	InFlight []FileOffset `json:"in_flight,omitempty"`
	// sparse-rows: rows.
	RowsTotal int64 `json:"rows_total,omitempty"`
	RowsDone  int64 `json:"rows_done,omitempty"`
	// Layer and NextRow: where a sparse-rows pack resumes.
	Layer   int   `json:"layer,omitempty"`
	NextRow int64 `json:"next_row,omitempty"`
	// Paused is set while a test fault point holds the pass.
	Paused bool `json:"paused,omitempty"`
	// ByteSources: where the bytes came from when the block is relayed.
	ByteSources
}

// FileOffset is a file being copied and how much of its temp file is
// complete and fsynced.
type FileOffset struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
}

// Truncated reports whether the lists carry fewer paths than the counts.
func (v BlockVerify) Truncated() bool { return v.NBad() > len(v.Bad) || v.NMissing() > len(v.Missing) }
