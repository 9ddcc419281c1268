// Package sparserows stages each rank's contiguous row range of huge
// embedding tables from safetensors checkpoints onto the node, as packed
// per-rank shard files or as sparse copies of the original shards.
//
// Tables: Spec.Tensors holds one name template with {L}; for each layer the
// table is the tensor of that name, or its parts NAME.part0, NAME.part1, …
// (in any shards) concatenated along rows in part order. Rows are split
// with Tile, the runtime's own split. Dtype, row width and offsets come from
// the shards' headers, found through model.safetensors.index.json (or, in a
// checkpoint without index, from every *.safetensors in Src).
//
// Outputs: packed writes engram-l<L>-r<r>of<tp>.bin per layer (PackedHeader,
// then the rank's rows verbatim as records); sparse-copy writes, for each
// shard holding rows of the rank, a sparse file of the shard's size with its
// header and only the rank's row ranges, plus engram-local.json
// (LocalManifest) and a copy of the index. New files are written under a
// hidden ".NAME.partial" name and renamed when complete.
//
// Blocks: the rank's rows of a layer are cut into blocks of Spec.BlockRows
// rows (about 64 MiB by default). Each block has a ledger entry in
// Dst/.sparklane-ledger.json (kind "sparse-rows", key
// "l<L>/r<rank>/rows-<first>-<last>", a sampled hash of the block's output
// bytes, Source naming format, tensor, rows and checkpoint id). Blocks are
// the unit of verification, rewrite, adoption and resume: progress is
// reported after each block's fsync with Layer and NextRow, and a pass
// given that progress as Options.Resume continues the temp file there.
package sparserows

import "fmt"

// Tile returns the rows rank owns out of rows split over tp ranks, matching
// the runtime's split: base = rows/tp, rem = rows%tp; rank r owns
// base + (r < rem) rows starting at r*base + min(r, rem).
func Tile(rows int64, tp, rank int) (first, count int64, err error) {
	if tp < 1 {
		return 0, 0, fmt.Errorf("tensor parallel size %d: must be at least 1", tp)
	}
	if rank < 0 || rank >= tp {
		return 0, 0, fmt.Errorf("rank %d outside 0..%d", rank, tp-1)
	}
	if rows < int64(tp) {
		return 0, 0, fmt.Errorf("table has %d rows, fewer than tp=%d ranks", rows, tp)
	}
	base := rows / int64(tp)
	rem := rows % int64(tp)
	r := int64(rank)
	count = base
	if r < rem {
		count++
	}
	first = r*base + min(r, rem)
	return first, count, nil
}
