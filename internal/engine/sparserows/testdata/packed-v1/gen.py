#!/usr/bin/env python3
"""Writes the packed-format fixture from internal/engine/sparserows/FORMAT.md alone
(no sparklane code): a one-shard checkpoint (ckpt/) whose table
model.layers.0.engram.embed.weight is BF16 [10, 132] (264-byte rows), and
the packed file engram-l0-r1of4.bin of rank 1 of tp 4 (rows 3..5).
Run from this directory: python3 gen.py"""
import hashlib, json, struct, zlib, os

ROWS, WIDTH, RB = 10, 132, 264
TENSOR = "model.layers.0.engram.embed.weight"

def row(i):
    return bytes(((i * 7 + j) & 0xFF) for j in range(RB))

table = b"".join(row(i) for i in range(ROWS))
other = bytes(range(16))  # a small F32 [2, 2] tensor before the table
hdr = {
    "__metadata__": {"format": "pt"},
    "model.norm.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
    TENSOR: {"dtype": "BF16", "shape": [ROWS, WIDTH], "data_offsets": [16, 16 + len(table)]},
}
hj = json.dumps(hdr, separators=(",", ":")).encode()
hj += b" " * ((8 - len(hj) % 8) % 8)
shard = "model-00001-of-00001.safetensors"
os.makedirs("ckpt", exist_ok=True)
with open(os.path.join("ckpt", shard), "wb") as f:
    f.write(struct.pack("<Q", len(hj)) + hj + other + table)
index = json.dumps({"metadata": {"total_size": 16 + len(table)},
                    "weight_map": {"model.norm.weight": shard, TENSOR: shard}},
                   separators=(",", ":")).encode()
with open(os.path.join("ckpt", "model.safetensors.index.json"), "wb") as f:
    f.write(index)

# Checkpoint id: sha256 over the index bytes, then each shard read (name
# order): its name and its raw header as stored (8-byte length + JSON);
# the first 24 hex digits.
h = hashlib.sha256()
h.update(index)
h.update(shard.encode())
h.update(struct.pack("<Q", len(hj)) + hj)
ckpt = h.hexdigest()[:24].encode()

# Rank 1 of tp 4 over 10 rows: base 2, rem 2 -> first 1*2+min(1,2)=3, count 3.
layer, rank, tp, first, count = 0, 1, 4, 3, 3
b = bytearray(4096)
b[0:8] = b"SPLROWS\x00"
struct.pack_into("<IIII", b, 8, 1, layer, rank, tp)
struct.pack_into("<QQQ", b, 24, first, count, RB)
off = 48
for s in (TENSOR.encode(), ckpt):
    struct.pack_into("<H", b, off, len(s)); off += 2
    b[off:off + len(s)] = s; off += len(s)
struct.pack_into("<I", b, 4092, zlib.crc32(bytes(b[:4092])) & 0xFFFFFFFF)
with open("engram-l%d-r%dof%d.bin" % (layer, rank, tp), "wb") as f:
    f.write(bytes(b) + b"".join(row(first + i) for i in range(count)))
