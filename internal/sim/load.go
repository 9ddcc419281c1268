package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/hubcache"
)

const indexName = "model.safetensors.index.json"

type loadStats struct {
	dir     string
	files   int
	tensors int
	bytes   int64
}

// load resolves the model dir, checks and reads every shard, then the
// engram files of this rank.
func (e *engine) load(ctx context.Context) (loadStats, error) {
	var st loadStats
	dir, err := resolveModelDir(e.cfg)
	if err != nil {
		return st, err
	}
	st.dir = dir
	e.logf("rank %d loading weights from %s (load cap %s)", e.cfg.NodeRank, dir, rateString(e.cfg.LoadMiBps))

	files, ix, err := modelFiles(dir, e.cfg.NoFollow)
	if err != nil {
		return st, err
	}
	var total int64
	for _, rel := range files {
		if fi, err := os.Stat(filepath.Join(dir, rel)); err == nil {
			total += fi.Size()
		}
	}
	lim := &limiter{bytesPerSec: e.cfg.LoadMiBps * (1 << 20), start: time.Now(), every: 5 * time.Second}
	lim.report = func(done int64, el time.Duration) {
		e.logf("rank %d loading: %s of %s read (%.0f MiB/s)", e.cfg.NodeRank, contract.HumanBytes(done), contract.HumanBytes(total), float64(done)/el.Seconds()/(1<<20))
	}
	buf := make([]byte, 1<<20)
	tensorsIn := map[string]map[string]bool{}
	// Where each tensor of the tree lies, so packed engram records can be
	// compared with the rows they claim to hold.
	loc := tensorIndex{}
	for _, rel := range files {
		p := filepath.Join(dir, rel)
		h, n, err := readShard(ctx, p, e.cfg.NoFollow, lim, buf)
		if err != nil {
			return st, err
		}
		st.files++
		st.tensors += len(h.Tensors)
		st.bytes += n
		names := map[string]bool{}
		for k, t := range h.Tensors {
			names[k] = true
			loc[k] = tensorLoc{path: p, off: h.DataStart + t.Begin, t: t}
		}
		tensorsIn[filepath.ToSlash(rel)] = names
		if e.cfg.FailAt == FailLoad {
			return st, fmt.Errorf("rank %d: simulated failure while loading %s (--fail-at load)", e.cfg.NodeRank, p)
		}
	}
	if ix != nil {
		// Every tensor the index names must be in the shard it names.
		names := make([]string, 0, len(ix.WeightMap))
		for k := range ix.WeightMap {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			shard := ix.WeightMap[k]
			if !tensorsIn[shard][k] {
				return st, fmt.Errorf("%s: tensor %s is mapped to %s but that shard's header has no such tensor: the tree is inconsistent, re-stage it", filepath.Join(dir, indexName), k, filepath.Join(dir, shard))
			}
		}
	}
	if e.cfg.EngramDir != "" {
		n, err := e.checkEngram(loc)
		if err != nil {
			return st, err
		}
		e.logf("rank %d engram files checked: %d in %s", e.cfg.NodeRank, n, e.cfg.EngramDir)
	}
	return st, nil
}

func rateString(mibps float64) string {
	if mibps <= 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%.0f MiB/s", mibps)
}

// resolveModelDir finds the directory that holds the shards: the path
// itself, a models--org--name repo's refs/main snapshot, or the repo of the
// served model name / model id inside a hub cache.
func resolveModelDir(c Config) (string, error) {
	p := c.ModelPath
	st, err := os.Stat(p)
	if err != nil {
		// A model id (org/name) resolved in the hub cache.
		if c.HFHubCache != "" && !filepath.IsAbs(p) && strings.Count(p, "/") == 1 {
			return snapshotDir(hubcache.RepoPath(c.HFHubCache, p))
		}
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("model path %s does not exist (set HF_HUB_CACHE to resolve a model id): mount or stage it", p)
		}
		return "", fmt.Errorf("model path %s: %v", p, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("model path %s is not a directory", p)
	}
	if hasShards(p) {
		return p, nil
	}
	if strings.HasPrefix(filepath.Base(p), hubcache.RepoPrefix) {
		return snapshotDir(p)
	}
	// A hub cache root: pick the repo of the served model name.
	repos, _ := filepath.Glob(filepath.Join(p, hubcache.RepoPrefix+"*"))
	for _, id := range []string{c.ServedModelName} {
		if strings.Count(id, "/") == 1 {
			cand := hubcache.RepoPath(p, id)
			if _, err := os.Stat(cand); err == nil {
				return snapshotDir(cand)
			}
		}
	}
	if len(repos) == 1 {
		return snapshotDir(repos[0])
	}
	if len(repos) > 1 {
		return "", fmt.Errorf("model path %s is a hub cache with %d repos: pass --served-model-name org/name to choose one", p, len(repos))
	}
	return "", fmt.Errorf("model path %s holds no *.safetensors and no %s: not a model directory", p, indexName)
}

// snapshotDir is repo/snapshots/<rev from refs/main>, or the only snapshot.
func snapshotDir(repo string) (string, error) {
	if b, err := os.ReadFile(filepath.Join(repo, hubcache.Refs, "main")); err == nil {
		rev := strings.TrimSpace(string(b))
		d := filepath.Join(repo, hubcache.Snapshots, rev)
		if _, err := os.Stat(d); err != nil {
			return "", fmt.Errorf("%s names revision %s but %s is missing: the hub cache is incomplete, re-stage it", filepath.Join(repo, hubcache.Refs, "main"), rev, d)
		}
		return d, nil
	}
	snaps, _ := filepath.Glob(filepath.Join(repo, hubcache.Snapshots, "*"))
	if len(snaps) == 1 {
		return snaps[0], nil
	}
	if _, err := os.Stat(repo); err != nil {
		return "", fmt.Errorf("hub repo %s does not exist: stage the model or fix HF_HUB_CACHE", repo)
	}
	return "", fmt.Errorf("%s has no refs/main and %d snapshots: cannot choose a revision", repo, len(snaps))
}

func hasShards(dir string) bool {
	if _, err := os.Lstat(filepath.Join(dir, indexName)); err == nil {
		return true
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	return len(m) > 0
}

// modelFiles lists the shards to load (relative to dir, sorted): the
// index's shards, each of which must exist, plus every other *.safetensors
// under dir. With nofollow a symlink anywhere in the tree is refused.
func modelFiles(dir string, nofollow bool) ([]string, *safetensors.Index, error) {
	seen := map[string]bool{}
	var files []string
	var ix *safetensors.Index
	ixPath := filepath.Join(dir, indexName)
	if fi, err := os.Lstat(ixPath); err == nil {
		if nofollow && fi.Mode()&fs.ModeSymlink != 0 {
			return nil, nil, fmt.Errorf("%s is a symlink, refused (--nofollow: the runtime opens weights with O_NOFOLLOW; stage a regular-file export)", ixPath)
		}
		ix, err = safetensors.ReadIndex(ixPath)
		if err != nil {
			return nil, nil, err
		}
		for _, s := range ix.Shards() {
			p := filepath.Join(dir, filepath.FromSlash(s))
			if _, err := os.Stat(p); err != nil {
				if _, lerr := os.Lstat(p); lerr == nil {
					return nil, nil, fmt.Errorf("%s: shard named by %s is a dangling symlink: re-stage the model", p, ixPath)
				}
				return nil, nil, fmt.Errorf("%s: shard named by %s is missing: re-stage the model", p, ixPath)
			}
			seen[filepath.ToSlash(s)] = true
			files = append(files, filepath.FromSlash(s))
		}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
		if p == dir {
			return nil
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.Type()&fs.ModeSymlink != 0 && nofollow {
			return fmt.Errorf("%s is a symlink, refused (--nofollow: the runtime opens weights with O_NOFOLLOW; stage a regular-file export)", p)
		}
		if !strings.HasSuffix(d.Name(), ".safetensors") {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if !seen[filepath.ToSlash(rel)] {
			seen[filepath.ToSlash(rel)] = true
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("model dir %s holds no *.safetensors: stage the model there", dir)
	}
	sort.Strings(files)
	return files, ix, nil
}

// readShard parses the header of p and reads every data byte at the rate
// the limiter allows. A symlink is refused under nofollow.
func readShard(ctx context.Context, p string, nofollow bool, lim *limiter, buf []byte) (*safetensors.Header, int64, error) {
	flags := os.O_RDONLY
	if nofollow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(p, flags, 0)
	if err != nil {
		if nofollow && errors.Is(err, syscall.ELOOP) {
			return nil, 0, fmt.Errorf("%s is a symlink, refused (--nofollow: the runtime opens weights with O_NOFOLLOW; stage a regular-file export)", p)
		}
		if _, lerr := os.Lstat(p); lerr == nil && errors.Is(err, fs.ErrNotExist) {
			return nil, 0, fmt.Errorf("%s is a dangling symlink: re-stage the model", p)
		}
		return nil, 0, fmt.Errorf("open shard %s: %v", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("stat shard %s: %v", p, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s is not a regular file", p)
	}
	h, err := safetensors.Parse(f, fi.Size(), p)
	if err != nil {
		return nil, 0, fmt.Errorf("corrupt safetensors shard: %w", err)
	}
	// Read every byte after the header, like a real engine copying
	// weights to the GPU.
	if _, err := f.Seek(h.DataStart, io.SeekStart); err != nil {
		return nil, 0, fmt.Errorf("seek shard %s: %v", p, err)
	}
	var n int64
	want := fi.Size() - h.DataStart
	for n < want {
		if err := ctx.Err(); err != nil {
			return nil, n, err
		}
		chunk := buf
		if rest := want - n; rest < int64(len(chunk)) {
			chunk = chunk[:rest]
		}
		m, err := io.ReadFull(f, chunk)
		n += int64(m)
		if err != nil {
			return nil, n, fmt.Errorf("read shard %s at byte %d of %d: %v: the file is shorter than its header says or unreadable", p, h.DataStart+n, fi.Size(), err)
		}
		if err := lim.wait(ctx, int64(m)); err != nil {
			return nil, n, err
		}
	}
	return h, n, nil
}

// limiter paces reads to bytesPerSec on an absolute schedule (0 = no cap)
// and reports progress every interval, so a long load shows in the logs.
type limiter struct {
	bytesPerSec float64
	start       time.Time
	done        int64
	every       time.Duration
	last        time.Time
	report      func(done int64, elapsed time.Duration)
}

func (l *limiter) wait(ctx context.Context, n int64) error {
	l.done += n
	if l.report != nil && l.every > 0 {
		if now := time.Now(); now.Sub(l.start) >= l.every && now.Sub(l.last) >= l.every {
			l.last = now
			l.report(l.done, now.Sub(l.start))
		}
	}
	if l.bytesPerSec <= 0 {
		return nil
	}
	due := l.start.Add(time.Duration(float64(l.done) / l.bytesPerSec * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
