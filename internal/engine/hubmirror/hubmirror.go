package hubmirror

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

// Spec is one hub-mirror [[staging]] block with node-local paths already
// prefixed by the node's fs_root; it is what Stage and Verify act on.
type Spec struct {
	// Src is the NAS hub root (models--org--name/{blobs,refs,snapshots});
	// it is only ever read.
	Src string
	// Dst is node-local; the mirror lands in Dst/hub/models--org--name/ so
	// HF_HUB_CACHE=Dst/hub works offline.
	Dst string
	// Repos are "org/name" ids to mirror.
	Repos []string
	// Skip are doublestar globs relative to snapshots/REV/; matching entries
	// never touch the node's disk.
	Skip []string
	// Verify is "sampled" (default) or "sha256" (full content hashed against
	// the LFS blob name while copying).
	Verify string
	// MinFree is the free space in bytes required on Dst before any write.
	MinFree int64
	// Exports are regular-file trees for runtimes that open with O_NOFOLLOW.
	Exports []Export
	// Roots are the directories the node lets staging write; Dst and every
	// export path must lie under one.
	Roots []string
	// SharedRoots are the fleet's shared_roots (the NAS) as the node sees
	// them. A source link may resolve only inside Src or one of these, so a
	// snapshot entry linking to /etc/shadow is refused instead of copied.
	SharedRoots []string
}

// Export asks for a regular-file tree of hard links to the mirror blobs of
// Repo at Path (same filesystem as Dst), for runtimes that refuse symlinks.
type Export struct{ Repo, Path string }

// Bind is one file of a skipped subtree that the serve step bind-mounts
// read-only from the NAS over its empty placeholder in an export.
type Bind struct {
	// Source is the NAS file path (links already resolved syntactically).
	Source string `json:"source"`
	// Target is the path relative to the export root.
	Target string `json:"target"`
	// ReadOnly is always true today; it is explicit so the serve step does
	// not have to assume it.
	ReadOnly bool `json:"read_only"`
}

// Kind is the ledger kind and the [[staging]] kind this engine implements.
const Kind = "hub-mirror"

// LedgerName is the ledger file inside Dst/hub.
const LedgerName = ".sparklane-ledger.json"

// tmpSuffix marks temp files: ".NAME.sparklane-tmp" beside NAME.
const tmpSuffix = ".sparklane-tmp"

// chunkSize is how much is copied at a time: progress counts it, and the
// flush interval (flushSize) is a whole number of them. Tests shrink it.
var chunkSize int64 = 32 << 20

// flushChunks is how many chunks Stage copies between fdatasyncs: 128 (4
// GiB). A cancel or kill -9 loses nothing of a temp file within the boot
// that wrote it (trustedPrefix); a crash or power cut of the machine loses
// at most two flush intervals per file in flight (the flush trails the
// copy by one interval, durablePrefix), which for a model's usual shards
// of up to 5 GB is the whole file. On this VM every flush before the end
// costs. A cold 4 GiB stage into new space, in one series: 6.33 s flushing
// every 32 MiB, 4.75 s every 1 GiB, cp -a + sync 3.96 s (FRESH=1
// scripts/bench-flush.sh 54a0132 4, this interval at 1 GiB); in another:
// 5.13 s every 1 GiB, 4.19 s with one flush at the end, cp -a + sync 4.30
// s (FRESH=1 HEAD_ARGS="-flush-mib 4096" scripts/bench-flush.sh HEAD 4).
var flushChunks int64 = 128

// flushSize is how many bytes Stage copies between fdatasyncs.
func flushSize() int64 { return chunkSize * flushChunks }

// spec is a validated Spec with cleaned paths.
type spec struct {
	Spec
	mirror string // Dst/hub
	sha256 bool
}

func tmpName(path string) string {
	return filepath.Join(filepath.Dir(path), tmpBase(filepath.Base(path)))
}

// tmpBase is the temp name of name in the same directory.
func tmpBase(name string) string { return "." + name + tmpSuffix }

// within reports whether p is root or lies under it (syntactically).
func within(p, root string) bool {
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator)) || root == "/"
}

func invalid(format string, a ...any) error {
	return fault.Permanent(fault.InvalidSpec, fmt.Errorf(format, a...))
}

// sameFileAlias reports whether a (which may not exist yet) is b or lies
// inside b when compared by device and inode of a's existing ancestors, so
// a dst that reaches src through another spelling is still caught without
// realpath on the source.
func sameFileAlias(a, b string) bool {
	bi, err := os.Stat(b)
	if err != nil {
		return false
	}
	for p := a; ; p = filepath.Dir(p) {
		if ai, err := os.Stat(p); err == nil && os.SameFile(ai, bi) {
			return true
		}
		if filepath.Dir(p) == p {
			return false
		}
	}
}

func validate(in Spec) (*spec, error) {
	s := &spec{Spec: in}
	if in.Src == "" || !filepath.IsAbs(in.Src) {
		return nil, invalid("hub-mirror src %q must be an absolute path", in.Src)
	}
	if in.Dst == "" || !filepath.IsAbs(in.Dst) {
		return nil, invalid("hub-mirror dst %q must be an absolute path", in.Dst)
	}
	s.Src = filepath.Clean(in.Src)
	s.Dst = filepath.Clean(in.Dst)
	s.mirror = filepath.Join(s.Dst, "hub")
	switch in.Verify {
	case "", "sampled":
		s.Verify = "sampled"
	case "sha256":
		s.Verify = "sha256"
		s.sha256 = true
	default:
		return nil, invalid("hub-mirror verify = %q: use \"sampled\" or \"sha256\"", in.Verify)
	}
	if len(in.Repos) == 0 {
		return nil, invalid("hub-mirror block with src %s has no repos: list repos = [\"org/name\"]", s.Src)
	}
	seen := map[string]bool{}
	for _, r := range in.Repos {
		parts := strings.Split(r, "/")
		ok := len(parts) <= 2
		for _, p := range parts {
			if p == "" || p == "." || p == ".." || strings.ContainsAny(p, `\`) {
				ok = false
			}
		}
		if !ok {
			return nil, invalid("hub-mirror repo %q: use \"org/name\"", r)
		}
		if seen[r] {
			return nil, invalid("hub-mirror repo %q is listed twice", r)
		}
		seen[r] = true
	}
	for _, g := range in.Skip {
		if !doublestar.ValidatePattern(g) {
			return nil, invalid("hub-mirror skip glob %q is not a valid pattern", g)
		}
	}
	if len(in.Roots) == 0 {
		return nil, invalid("dst %s: the node has no roots configured, so staging may not write anywhere: add roots to the node", s.Dst)
	}
	if err := staging.UnderRoots(s.Dst, in.Roots); err != nil {
		return nil, err
	}
	if s.Dst == s.Src || within(s.Dst, s.Src) || sameFileAlias(s.Dst, s.Src) {
		return nil, invalid("hub-mirror dst %s is src %s or lies inside it: the mirror must be on the node's own disk, outside the source", s.Dst, s.Src)
	}
	if within(s.Src, s.mirror) {
		return nil, invalid("hub-mirror src %s lies inside the mirror %s: staging would overwrite its own source", s.Src, s.mirror)
	}
	for _, e := range in.Exports {
		if !seen[e.Repo] {
			return nil, invalid("hub-mirror export of %q: that repo is not in repos %v", e.Repo, in.Repos)
		}
		if !filepath.IsAbs(e.Path) {
			return nil, invalid("hub-mirror export path %q must be absolute", e.Path)
		}
		p := filepath.Clean(e.Path)
		if err := staging.UnderRoots(p, in.Roots); err != nil {
			return nil, err
		}
		if within(p, s.Src) || sameFileAlias(p, s.Src) {
			return nil, invalid("hub-mirror export path %s lies inside src %s", p, s.Src)
		}
		if within(p, s.mirror) || within(s.mirror, p) {
			return nil, invalid("hub-mirror export path %s overlaps the mirror %s: put exports beside it", p, s.mirror)
		}
	}
	return s, nil
}
