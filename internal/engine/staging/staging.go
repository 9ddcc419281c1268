package staging

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// Options steer one staging pass.
type Options struct {
	// DryRun computes the plan and writes nothing.
	DryRun bool
	// Force re-hashes every file against the source and re-copies what
	// differs, ignoring the ledger (--stage=force).
	Force bool
	// Parallel is how many files are in flight at once (default 4).
	Parallel int
	// Resume is the progress of an earlier, interrupted attempt (from
	// Temporal heartbeat details); work it records as done is not redone.
	Resume *Progress
	// OnProgress is called as work advances (at most a few times a second
	// and at every chunk boundary); activities heartbeat it.
	OnProgress func(Progress)
	// Checked are files this activity compared with the source moments
	// before the pass (the relay's receiver), by mirror path: the pass takes
	// their check from here instead of sampling both sides again.
	Checked map[string]Checked
	// Pacer paces the pass's writes to the node's disk (a rate, a
	// MemAvailable floor) while a lane serves beside it; nil lets every
	// write go at once, as when the node serves nothing. With one, the
	// relay's receiver and sparse-rows also drop what they wrote from the
	// page cache (hub-mirror always does).
	Pacer *Pacer
}

// Checked is one file found matching the source: its sampled hash (the
// staged file's and the source's agreed), its full sha256 when the whole
// content was hashed and matched the file's LFS name, and the staged
// file's identity when it was checked (looked at, at At): the pass takes
// the check only while the file still has that identity.
type Checked struct {
	Sampled string
	SHA256  string
	Stat    unix.Stat_t
	At      time.Time
}

// Progress is the resumable state of a pass. It is small and JSON-safe:
// it travels in heartbeat details.
type Progress struct {
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
	// Sources: where the bytes came from when the block is relayed
	// between nodes (internal/engine/relay), so an operator sees that the NAS
	// is read about once per lane and which peers carried the rest.
	Sources
}

// Sources counts where a relayed pass's bytes came from.
type Sources struct {
	// FromNAS is the bytes read from the NAS: relay copies and their
	// sampled checks, plus the hub-mirror pass's own reads (NASRead).
	FromNAS int64 `json:"from_nas,omitempty"`
	// FromPeers is the bytes received from each peer node, by name.
	FromPeers map[string]int64 `json:"from_peers,omitempty"`
}

// FileOffset is one in-flight file.
type FileOffset struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
}

// Result is what one block's pass did. Field names are the JSON the CLI prints.
type Result struct {
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
	// NASRead is the bytes a hub-mirror pass read from the source itself
	// (sampled checks, small files whole, copies): what the relay adds to
	// its own count for FromNAS. A pass over sealed blobs reads none.
	NASRead int64 `json:"-"`
	// Exports lists the export trees made (node-local paths).
	Exports []string `json:"exports,omitempty"`
	// Sources is set when the block was relayed between nodes.
	Sources
	// Relay says how the relay went when it was on: files refetched from
	// the NAS because a peer sent them wrong, and peers given up on (slow,
	// gone, wrong) with why.
	Relay *RelayReport `json:"relay,omitempty"`
}

// RelayReport is the relay's account of one node's pass.
type RelayReport struct {
	Files        int               `json:"files"`
	Present      int               `json:"present"`
	Refetched    int               `json:"refetched,omitempty"`
	PeerFailures map[string]string `json:"peer_failures,omitempty"`
	Resumed      int64             `json:"resumed,omitempty"`
	// Error is why the relay stopped early, when it did (what it did not
	// deliver was then read from the NAS).
	Error string `json:"error,omitempty"`
}

// VerifyResult is what a verify-only pass found.
//
// It travels through Temporal (activity results, CutoverResult, error
// details), where every payload is bounded (2 MB) and stays in history
// for the retention period: a wiped destination of 20,000 small files
// would list them all. So its JSON form carries the counts and only the
// first ListLimit paths of each list; Spill writes the full lists to a
// file on the node first and names it in ListFile.
type VerifyResult struct {
	OK int `json:"ok"`
	// Bad and Missing are the paths at fault; past ListLimit, only the
	// first ListLimit survive serialization (the counts say how many).
	Bad     []string `json:"bad"`
	Missing []string `json:"missing"`
	// BadCount and MissingCount are the full counts when the lists were
	// cut (0: the lists are whole).
	BadCount     int `json:"bad_count,omitempty"`
	MissingCount int `json:"missing_count,omitempty"`
	// ListFile is the file on the node holding the full lists, one
	// "bad PATH" or "missing PATH" a line, when they were cut.
	ListFile string `json:"list_file,omitempty"`
	// Full is true when whole contents were hashed (--full).
	Full bool `json:"full"`
}

// ListLimit is how many paths of each list a VerifyResult carries through
// Temporal: enough to act on, small enough that 20,000 bad files cost a
// few kilobytes of history.
const ListLimit = 20

// Clean reports whether nothing is bad or missing.
func (v VerifyResult) Clean() bool { return v.NBad() == 0 && v.NMissing() == 0 }

// NBad is how many paths are bad, whether or not the list was cut.
func (v VerifyResult) NBad() int { return max(v.BadCount, len(v.Bad)) }

// NMissing is how many paths are missing, whether or not the list was cut.
func (v VerifyResult) NMissing() int { return max(v.MissingCount, len(v.Missing)) }

// Truncated reports whether the lists carry fewer paths than the counts.
func (v VerifyResult) Truncated() bool { return v.NBad() > len(v.Bad) || v.NMissing() > len(v.Missing) }

// MarshalJSON cuts each list to ListLimit paths and records the full
// counts, so no code path can put an unbounded list into a payload. It is
// pure (no I/O): workflows marshal it too.
func (v VerifyResult) MarshalJSON() ([]byte, error) {
	type plain VerifyResult
	p := plain(v)
	if len(p.Bad) > ListLimit {
		p.BadCount, p.Bad = max(p.BadCount, len(p.Bad)), p.Bad[:ListLimit]
	}
	if len(p.Missing) > ListLimit {
		p.MissingCount, p.Missing = max(p.MissingCount, len(p.Missing)), p.Missing[:ListLimit]
	}
	return json.Marshal(p)
}

// Spill writes the full lists to name in d — a directory opened beneath
// the node's roots, so the list lands where staging may write and nowhere
// else — when either list is longer than ListLimit, and names the file in
// ListFile, so an operator can still read every path on the node. The file
// is written to a temp name, synced and renamed. A result within the limit
// is left as it is and nothing is written.
func (v *VerifyResult) Spill(d *Dir, name string) error {
	if len(v.Bad) <= ListLimit && len(v.Missing) <= ListLimit {
		return nil
	}
	var b strings.Builder
	for _, p := range v.Bad {
		b.WriteString("bad " + p + "\n")
	}
	for _, p := range v.Missing {
		b.WriteString("missing " + p + "\n")
	}
	tmp := "." + name + ".tmp"
	fail := func(err error) error {
		_ = d.Remove(tmp)
		return fmt.Errorf("verify list %s: %w", d.Join(name), err)
	}
	f, err := d.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fail(err)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	if err := d.Rename(tmp, name); err != nil {
		return fail(err)
	}
	v.ListFile = d.Join(name)
	return nil
}

// UnderRoots checks that path (absolute, cleaned syntactically) lies inside
// one of roots; a ".." that escapes a root is caught because the check is on
// the cleaned path. The error names the path and the roots.
func UnderRoots(path string, roots []string) error {
	if !filepath.IsAbs(path) {
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s: not an absolute path", path))
	}
	c := filepath.Clean(path)
	for _, r := range roots {
		r = filepath.Clean(r)
		if c == r || strings.HasPrefix(c, r+string(filepath.Separator)) || r == "/" {
			return nil
		}
	}
	return fault.Permanent(fault.InvalidSpec, fmt.Errorf("%s is outside the node's roots %v: add a root in the node's config or change dst", path, roots))
}

// FreeBytes returns the bytes available to an unprivileged writer on the
// filesystem holding path (its nearest existing ancestor).
func FreeBytes(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := nearest(path, func(p string) error { return syscall.Statfs(p, &st) }); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// DevOf returns the device of the filesystem holding path (its nearest
// existing ancestor): what a file must be on to free space there.
func DevOf(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := nearest(path, func(p string) error { return syscall.Stat(p, &st) }); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return uint64(st.Dev), nil
}

// nearest calls look on path, then on each ancestor in turn until it
// succeeds; it returns the last failure when none does.
func nearest(path string, look func(string) error) error {
	p := filepath.Clean(path)
	for {
		err := look(p)
		if err == nil {
			return nil
		}
		parent := filepath.Dir(p)
		if parent == p {
			return err
		}
		p = parent
	}
}

// CheckFree fails with a NoSpace error naming needed vs free when the
// filesystem holding path has less than need bytes available.
func CheckFree(path string, need int64) error {
	if need <= 0 {
		return nil
	}
	free, err := FreeBytes(path)
	if err != nil {
		return err
	}
	if free < need {
		return fault.Permanent(fault.NoSpace, &ShortError{Path: path, Need: need, Free: free,
			Err: fmt.Errorf("%s: need %s free, have %s: free space or lower min_free", path, contract.HumanBytes(need), contract.HumanBytes(free))})
	}
	return nil
}

// ShortError is a min_free check that failed, with its numbers: the node
// worker uses them to say which lanes' blocks would free enough, or (with
// --make-room) to prune them itself.
type ShortError struct {
	// Path is the directory checked; Need the free bytes it must have,
	// Free what it has.
	Path       string
	Need, Free int64
	Err        error
}

func (e *ShortError) Error() string { return e.Err.Error() }
func (e *ShortError) Unwrap() error { return e.Err }

// CheckFreeToWrite is min_free applied to what a pass must actually write
// (issue 14, item 7): toWrite bytes of a block of total bytes, with
// min_free read as "the block plus headroom". It needs toWrite plus the
// headroom (min_free − total, when positive) free, so a first stage needs
// max(min_free, total) as before, while a verify-only pass (toWrite = 0)
// needs nothing and passes on a disk the mirror itself filled.
func CheckFreeToWrite(path string, minFree, total, toWrite int64) error {
	if toWrite <= 0 {
		return nil
	}
	need := toWrite + max(0, minFree-total)
	free, err := FreeBytes(path)
	if err != nil {
		return err
	}
	if free < need {
		return fault.Permanent(fault.NoSpace, &ShortError{Path: path, Need: need, Free: free,
			Err: fmt.Errorf("%s: need %s free (%s to write of the block's %s, min_free %s), have %s: free space or lower min_free", path, contract.HumanBytes(need), contract.HumanBytes(toWrite), contract.HumanBytes(total), contract.HumanBytes(minFree), contract.HumanBytes(free))})
	}
	return nil
}

// ShortAfterFull is a write that ran out of space (err, ENOSPC or EDQUOT)
// told as a failed min_free check: the free space the block still needs
// to finish (toWrite of its total bytes, which counts what its temp files
// hold once, plus min_free's headroom) against what is free now. So the
// node worker names the lanes whose blocks would free enough, or (with
// --make-room) prunes them and stages again, which resumes the copy.
func ShortAfterFull(path string, minFree, total, toWrite int64, err error) error {
	free, ferr := FreeBytes(path)
	if ferr != nil {
		return err
	}
	need := toWrite + max(0, minFree-total)
	return &ShortError{Path: path, Need: need, Free: free,
		Err: fmt.Errorf("%w (the block still needs %s free to finish, have %s; what it wrote is kept)", err, contract.HumanBytes(need), contract.HumanBytes(free))}
}
