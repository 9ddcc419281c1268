package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
	"github.com/sparklane/sparklane/internal/engine/sparserows"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

const rowCols = 3584 // BF16 → 7168-byte rows

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sparserows-bench gen|ranges|pack|verify [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	src := fs.String("src", "", "checkpoint dir")
	dst := fs.String("dst", "", "output dir (pack, verify)")
	gib := fs.Float64("gib", 4, "table size in GiB over all layers (gen)")
	layers := fs.Int("layers", 2, "layers, one table and one shard each (gen, others)")
	rank := fs.Int("rank", 1, "rank")
	tp := fs.Int("tp", 4, "tensor parallel size")
	format := fs.String("format", sparserows.FormatPacked, "packed | sparse-copy")
	mode := fs.String("mode", "", "copy mode: '' (auto), copy_file_range, readwrite")
	full := fs.Bool("full", false, "verify every byte against the source")
	fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "gen":
		err = gen(*src, *gib, *layers)
	default:
		spec := sparserows.Spec{Src: *src, Dst: *dst, Format: *format, Tensors: []string{"model.layers.{L}.engram.table"},
			Rank: *rank, TP: *tp, Roots: []string{"/"}, CopyMode: *mode}
		for l := 0; l < *layers; l++ {
			spec.Layers = append(spec.Layers, l)
		}
		err = run(os.Args[1], spec, *full)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sparserows-bench:", err)
		os.Exit(1)
	}
}

func run(cmd string, spec sparserows.Spec, full bool) error {
	ctx := context.Background()
	start := time.Now()
	out := map[string]any{}
	switch cmd {
	case "ranges":
		if spec.Dst == "" {
			spec.Dst = "/unused" // Plan checks dst syntax only
		}
		pi, err := sparserows.Plan(spec)
		if err != nil {
			return err
		}
		// One line per contiguous source range: shard offset count.
		for _, lp := range pi.Layers {
			for _, p := range lp.Parts {
				if p.RankCount > 0 {
					fmt.Printf("%s %d %d\n", filepath.Join(spec.Src, p.Shard), p.ByteBegin, p.ByteEnd-p.ByteBegin)
				}
			}
		}
		return nil
	case "pack":
		res, err := sparserows.Stage(ctx, spec, staging.Options{})
		if err != nil {
			return err
		}
		out["result"] = res
		out["bytes"] = res.CopiedBytes
	case "verify":
		vr, err := sparserows.Verify(ctx, spec, full)
		if err != nil {
			return err
		}
		if !vr.Clean() {
			return fmt.Errorf("verify found bad %v missing %v", vr.Bad, vr.Missing)
		}
		out["result"] = vr
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	out["seconds"] = time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(out)
}

// gen writes layers shards, each with a small leading tensor and one BF16
// table of rowCols columns, gib/layers GiB each, plus the index.
func gen(dir string, gib float64, layers int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rows := int64(gib*(1<<30)) / int64(layers) / (rowCols * 2)
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	buf := make([]byte, 16<<20)
	rng.Read(buf)
	wm := map[string]string{}
	for l := 0; l < layers; l++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", l+1, layers)
		table := fmt.Sprintf("model.layers.%d.engram.table", l)
		hdr, laid, err := safetensors.Encode([]safetensors.Tensor{
			{Name: fmt.Sprintf("model.layers.%d.norm.weight", l), DType: "BF16", Shape: []int64{rowCols}},
			{Name: table, DType: "BF16", Shape: []int64{rows, rowCols}},
		}, map[string]string{"format": "pt"})
		if err != nil {
			return err
		}
		wm[table], wm[laid[0].Name] = name, name
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if _, err := f.Write(hdr); err != nil {
			return err
		}
		for left := laid[1].End; left > 0; {
			n := min(left, int64(len(buf)))
			buf[0]++ // vary chunks a little
			if _, err := f.Write(buf[:n]); err != nil {
				return err
			}
			left -= n
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": wm})
	return os.WriteFile(filepath.Join(dir, sparserows.IndexName), b, 0o644)
}
