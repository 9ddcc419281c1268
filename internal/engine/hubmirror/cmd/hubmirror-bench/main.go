package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/engine/hubmirror"
	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/hubcache"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hubmirror-bench gen|stage|verify [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "gen":
		err = gen(os.Args[2:])
	case "stage", "verify":
		err = run(ctx, os.Args[1], os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: use gen, stage or verify", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hubmirror-bench:", err)
		os.Exit(1)
	}
}

// gen writes repo org/NAME with FILES LFS blobs totalling GIB GiB, linked
// from snapshots/REV/, plus refs/main.
func gen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ExitOnError)
	hub := fs.String("hub", "", "hub root to create")
	repo := fs.String("repo", "org/big", "repo id")
	total := fs.Float64("gib", 8, "total size in GiB")
	files := fs.Int("files", 40, "number of files")
	fs.Parse(args)
	if *hub == "" || *files <= 0 {
		return fmt.Errorf("gen: -hub and -files > 0 are required")
	}
	dir := hubcache.RepoPath(*hub, *repo)
	rev := "0123456789abcdef0123456789abcdef01234567"
	for _, d := range []string{hubcache.Blobs, hubcache.Refs, filepath.Join(hubcache.Snapshots, rev)} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	per := int64(*total*float64(1<<30)) / int64(*files)
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	buf := make([]byte, 4<<20)
	for i := 0; i < *files; i++ {
		size := per
		if per > 1<<20 {
			size += int64(i%7) * 4096 // not all equal sizes
		}
		tmp := filepath.Join(dir, hubcache.Blobs, fmt.Sprintf(".gen-%d", i))
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		h := sha256.New()
		w := io.MultiWriter(f, h)
		for left := size; left > 0; {
			c := int64(len(buf))
			if c > left {
				c = left
			}
			rng.Read(buf[:c])
			if _, err := w.Write(buf[:c]); err != nil {
				return err
			}
			left -= c
		}
		if err := f.Close(); err != nil {
			return err
		}
		sum := hex.EncodeToString(h.Sum(nil))
		if err := os.Rename(tmp, filepath.Join(dir, hubcache.Blobs, sum)); err != nil {
			return err
		}
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, *files)
		if *files > 100 {
			name = fmt.Sprintf("shards/%03d/file-%06d.bin", i/1000, i)
		}
		link := filepath.Join(dir, hubcache.Snapshots, rev, name)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Dir(link), filepath.Join(dir, hubcache.Blobs, sum))
		if err := os.Symlink(rel, link); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, hubcache.Refs, "main"), []byte(rev), 0o644)
}

func run(ctx context.Context, cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	src := fs.String("src", "", "hub root on the NAS")
	dst := fs.String("dst", "", "node-local dst (mirror in DST/hub)")
	repos := fs.String("repos", "", "comma-separated org/name")
	roots := fs.String("roots", "", "comma-separated roots (default: dst's parent)")
	verify := fs.String("verify", "sampled", "sampled | sha256")
	parallel := fs.Int("parallel", 4, "files in flight")
	progress := fs.String("progress", "", "write the latest progress JSON here (heartbeat stand-in)")
	resume := fs.String("resume", "", "resume from this progress JSON")
	full := fs.Bool("full", false, "verify: hash whole contents")
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile of the run here (go tool pprof)")
	flushMiB := fs.Int64("flush-mib", 0, "fdatasync every this many MiB, a multiple of the engine's chunk (0: the engine's own interval); for measuring the flush cadence")
	wb := fs.Bool("write-behind", true, "start each chunk's writeback as soon as it is copied (sync_file_range)")
	db := fs.Bool("drop-behind", true, "drop each chunk from the page cache once written back (sync_file_range, fadvise)")
	fs.Parse(args)
	defer hubmirror.SetWriteBehind(*wb)()
	defer hubmirror.SetDropBehind(*db)()
	if chunk := hubmirror.ChunkSize() >> 20; *flushMiB < 0 || *flushMiB > 1<<20 || *flushMiB%chunk != 0 {
		return fmt.Errorf("-flush-mib %d: want a multiple of the engine's %d MiB chunk up to 1 TiB, or 0 for the engine's own interval (%d MiB)", *flushMiB, chunk, hubmirror.FlushSize()>>20)
	}
	if *flushMiB > 0 {
		defer hubmirror.SetFlushChunks((*flushMiB << 20) / hubmirror.ChunkSize())()
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	sp := hubmirror.Spec{Src: *src, Dst: *dst, Repos: strings.Split(*repos, ","), Verify: *verify}
	if *roots == "" {
		sp.Roots = []string{filepath.Dir(*dst)}
	} else {
		sp.Roots = strings.Split(*roots, ",")
	}
	enc := json.NewEncoder(os.Stdout)
	if cmd == "verify" {
		v, err := hubmirror.Verify(ctx, sp, *full)
		if err != nil {
			return err
		}
		return enc.Encode(v)
	}
	opts := staging.Options{Parallel: *parallel}
	if *resume != "" {
		b, err := os.ReadFile(*resume)
		if err != nil {
			return fmt.Errorf("read resume file: %w", err)
		}
		var p staging.Progress
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("resume file %s: %w", *resume, err)
		}
		opts.Resume = &p
	}
	if *progress != "" {
		opts.OnProgress = func(p staging.Progress) {
			b, _ := json.Marshal(p)
			atomicfile.Write(*progress, b, 0o644)
		}
	}
	res, err := hubmirror.Stage(ctx, sp, opts)
	if err != nil {
		return err
	}
	return enc.Encode(res)
}
