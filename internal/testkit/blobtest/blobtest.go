package blobtest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/ledger"
	"github.com/sparklane/sparklane/internal/engine/safetensors"
)

// Data returns n deterministic pseudo-random bytes for seed.
func Data(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := n - n%8; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// SHAHex is b's sha256 in hex, the name of a hub blob of b.
func SHAHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Unsampled returns two offsets of a blob of size bytes outside every
// region the ledger samples (head, tail, spread windows): early just past
// the head, late in the gap after the tenth spread window.
func Unsampled(size int) (early, late int) {
	early = ledger.HeadBytes + 5
	late = ledger.HeadBytes + 10*((size-ledger.HeadBytes-ledger.TailBytes)/ledger.SpreadSamples) + 5
	return early, late
}

// OtherVersion is good with its two Unsampled bytes changed: the same
// size and sampled hash, another sha256. It fails t when the versions
// sample differently, whole or cut to any of prefixes, since a test on
// them would then not exercise what sampling misses.
func OtherVersion(t testing.TB, good []byte, prefixes ...int) []byte {
	t.Helper()
	early, late := Unsampled(len(good))
	bad := append([]byte(nil), good...)
	bad[early] ^= 0x5a
	bad[late] ^= 0x5a
	for _, n := range append([]int{len(good)}, prefixes...) {
		if ledger.SampleBytes(bad[:n]) != ledger.SampleBytes(good[:n]) {
			t.Fatalf("the versions differ inside a sampled region of their first %d bytes: the test would not exercise what sampling misses", n)
		}
	}
	return bad
}

// RewriteInPlace writes data over the file at path from offset 0, as a
// writer on the NAS rewriting a blob in place would (no truncate, no
// rename: the same inode), and fails t unless the kernel stamped the
// write on the file's ctime or mtime.
func RewriteInPlace(t testing.TB, path string, data []byte) {
	t.Helper()
	var before, after unix.Stat_t
	if err := unix.Stat(path, &before); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(data, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(path, &after); err != nil {
		t.Fatal(err)
	}
	if before.Ctim == after.Ctim && before.Mtim == after.Mtim {
		t.Fatalf("rewriting %s in place left its ctime and mtime as they were: the kernel did not stamp the write", path)
	}
}

// EngramTables writes one BF16 [rows,128] table per layer, a
// safetensors shard each, plus the index, with row-dependent content.
func EngramTables(t testing.TB, dir string, rows map[int]int64) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	wm := map[string]string{}
	for l, n := range rows {
		name := fmt.Sprintf("engram-l%d.safetensors", l)
		tn := fmt.Sprintf("model.layers.%d.engram.table", l)
		wm[tn] = name
		hdr, laid, err := safetensors.Encode([]safetensors.Tensor{{Name: tn, DType: "BF16", Shape: []int64{n, 128}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		fh, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.Write(hdr); err != nil {
			t.Fatal(err)
		}
		total := laid[0].End - laid[0].Begin
		buf := make([]byte, 8<<20)
		var x uint64 = uint64(l) * 0x9e3779b97f4a7c15
		for off := int64(0); off < total; off += int64(len(buf)) {
			c := min(int64(len(buf)), total-off)
			for i := int64(0); i+8 <= c; i += 8 {
				x ^= x << 13
				x ^= x >> 7
				x ^= x << 17
				binary.LittleEndian.PutUint64(buf[i:], x)
			}
			if _, err := fh.Write(buf[:c]); err != nil {
				t.Fatal(err)
			}
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": wm})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
