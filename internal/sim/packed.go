package sim

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"

	"github.com/sparklane/sparklane/internal/engine/safetensors"
)

// The stand-in runtime's reader of packed engram files. It follows
// internal/engine/sparserows/FORMAT.md on its own (it does not call the packer's
// decoder), so a packer that drifted from the documented layout fails here
// as it would in the real runtime.

// packedHeaderSize and the offsets below are FORMAT.md's.
const (
	packedHeaderSize = 4096
	packedVersion    = 1
	packedMaxString  = 1024
)

// packedHeader is a decoded header (FORMAT.md, "Header").
type packedHeader struct {
	layer, rank, tp    int
	firstRow, rowCount int64
	recordSize         int64
	tensor, checkpoint string
}

// readPackedHeader decodes and checks a packed file's header and that the
// file is exactly header + row_count × record_size bytes.
func readPackedHeader(path string) (packedHeader, error) {
	var h packedHeader
	f, err := os.Open(path)
	if err != nil {
		return h, err
	}
	defer f.Close()
	b := make([]byte, packedHeaderSize)
	if _, err := io.ReadFull(f, b); err != nil {
		return h, fmt.Errorf("%s: read the %d-byte header: %v", path, packedHeaderSize, err)
	}
	le := binary.LittleEndian
	if !bytes.Equal(b[0:8], []byte("SPLROWS\x00")) {
		return h, fmt.Errorf("%s: magic %q, want \"SPLROWS\\x00\": not a packed engram file", path, b[0:8])
	}
	if got, want := le.Uint32(b[4092:]), crc32.ChecksumIEEE(b[:4092]); got != want {
		return h, fmt.Errorf("%s: header CRC-32 %08x, bytes [0,4092) give %08x: corrupt header", path, got, want)
	}
	if v := le.Uint32(b[8:]); v != packedVersion {
		return h, fmt.Errorf("%s: format version %d, this runtime reads %d", path, v, packedVersion)
	}
	h.layer, h.rank, h.tp = int(le.Uint32(b[12:])), int(le.Uint32(b[16:])), int(le.Uint32(b[20:]))
	h.firstRow, h.rowCount, h.recordSize = int64(le.Uint64(b[24:])), int64(le.Uint64(b[32:])), int64(le.Uint64(b[40:]))
	off := 48
	var strs [2]string
	for i := range strs {
		n := int(le.Uint16(b[off:]))
		off += 2
		if n > packedMaxString || off+n > 4092 {
			return h, fmt.Errorf("%s: header string %d of %d bytes overruns the header", path, i, n)
		}
		strs[i] = string(b[off : off+n])
		off += n
	}
	if strings.Trim(string(b[off:4092]), "\x00") != "" {
		return h, fmt.Errorf("%s: non-zero bytes in the header padding [%d,4092): corrupt header", path, off)
	}
	h.tensor, h.checkpoint = strs[0], strs[1]
	if h.recordSize < 1 || h.rowCount < 0 || h.tp < 1 || h.rank >= h.tp {
		return h, fmt.Errorf("%s: header says %d records of %d bytes, rank %d of tp %d: corrupt header", path, h.rowCount, h.recordSize, h.rank, h.tp)
	}
	st, err := f.Stat()
	if err != nil {
		return h, err
	}
	if want := packedHeaderSize + h.rowCount*h.recordSize; st.Size() != want {
		return h, fmt.Errorf("%s: %d bytes, header says %d records of %d bytes (%d bytes): truncated or overlong, re-stage", path, st.Size(), h.rowCount, h.recordSize, want)
	}
	return h, nil
}

// tensorLoc is where a tensor of the model tree lies: file, absolute
// offset of its data, and its header entry.
type tensorLoc struct {
	path string
	off  int64
	t    safetensors.Tensor
}

// tensorIndex maps tensor names of the loaded model tree to their place.
type tensorIndex map[string]tensorLoc

// rowSource finds row r of a table in the tree: the tensor itself, or its
// parts NAME.part0, NAME.part1, … concatenated along rows (FORMAT.md).
func (ix tensorIndex) rowSource(name string) (func(row int64) (string, int64, bool), int64, bool) {
	var parts []tensorLoc
	if l, ok := ix[name]; ok {
		parts = []tensorLoc{l}
	} else {
		for k := 0; ; k++ {
			l, ok := ix[fmt.Sprintf("%s.part%d", name, k)]
			if !ok {
				break
			}
			parts = append(parts, l)
		}
	}
	if len(parts) == 0 {
		return nil, 0, false
	}
	rb, err := parts[0].t.RowBytes()
	if err != nil {
		return nil, 0, false
	}
	return func(row int64) (string, int64, bool) {
		for _, p := range parts {
			if n := p.t.Rows(); row < n {
				return p.path, p.off + row*rb, true
			} else {
				row -= n
			}
		}
		return "", 0, false
	}, rb, true
}

// readPackedRecords reads every record of a packed file (FORMAT.md,
// "Records") and, when the table is in the model tree, compares the
// first, the last and up to 62 spread records with the rows they hold.
// Returns how many records were compared.
func readPackedRecords(path string, h packedHeader, loc tensorIndex) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	src, rb, ok := loc.rowSource(h.tensor)
	if ok && rb != h.recordSize {
		return 0, fmt.Errorf("%s: %d-byte records, but rows of %s in the model tree are %d bytes: packed from another table, re-stage", path, h.recordSize, h.tensor, rb)
	}
	want := map[int64]bool{}
	if ok && h.rowCount > 0 {
		want[0], want[h.rowCount-1] = true, true
		for k := int64(1); k <= 62; k++ {
			want[k*(h.rowCount-1)/63] = true
		}
	}
	r := bufio.NewReaderSize(io.NewSectionReader(f, packedHeaderSize, h.rowCount*h.recordSize), 1<<20)
	rec := make([]byte, h.recordSize)
	row := make([]byte, h.recordSize)
	files := map[string]*os.File{}
	defer func() {
		for _, sf := range files {
			sf.Close()
		}
	}()
	compared := 0
	for i := int64(0); i < h.rowCount; i++ {
		if _, err := io.ReadFull(r, rec); err != nil {
			return compared, fmt.Errorf("%s: read record %d: %v", path, i, err)
		}
		if !want[i] {
			continue
		}
		sp, off, found := src(h.firstRow + i)
		if !found {
			return compared, fmt.Errorf("%s: record %d holds row %d, beyond table %s in the model tree: packed from another checkpoint, re-stage", path, i, h.firstRow+i, h.tensor)
		}
		sf := files[sp]
		if sf == nil {
			if sf, err = os.Open(sp); err != nil {
				return compared, err
			}
			files[sp] = sf
		}
		if _, err := sf.ReadAt(row, off); err != nil {
			return compared, fmt.Errorf("read row %d of %s from %s: %v", h.firstRow+i, h.tensor, sp, err)
		}
		if !bytes.Equal(rec, row) {
			return compared, fmt.Errorf("%s: record %d (offset %d) is not row %d of %s in %s: corrupt or stale engram file, re-stage", path, i, packedHeaderSize+i*h.recordSize, h.firstRow+i, h.tensor, sp)
		}
		compared++
	}
	return compared, nil
}
