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
// A pass a full disk stops keeps its temp file too, and its NoSpace error
// carries a staging.ShortError with the free space the rest needs, so the
// node can name lanes to prune; once space is freed the next pass resumes.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package sparserows
