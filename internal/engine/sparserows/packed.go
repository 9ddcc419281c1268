package sparserows

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// Packed file layout: a PackedHeaderSize-byte header, then RowCount records
// of RecordSize bytes each, one per row, in source order. FORMAT.md in this
// directory is the runtime's read contract (every field, what a record
// holds, how the rank's rows are chosen); testdata/packed-v1 is a fixture
// written from that page alone.
//
// Header (little-endian):
//
//	0   8  magic "SPLROWS\x00"
//	8   4  format version (PackedVersion)
//	12  4  layer
//	16  4  rank
//	20  4  tp
//	24  8  first row
//	32  8  row count
//	40  8  record size (bytes per row)
//	48  2  tensor name length, then the name (at most 1024 bytes)
//	... 2  checkpoint id length, then the id (at most 1024 bytes)
//	4092 4 CRC-32 (IEEE) of bytes [0, 4092)
const (
	PackedHeaderSize = 4096
	PackedVersion    = 1
	maxPackedString  = 1024
)

// PackedMagic opens every packed file.
var PackedMagic = [8]byte{'S', 'P', 'L', 'R', 'O', 'W', 'S', 0}

// PackedHeader describes one packed per-layer, per-rank file.
type PackedHeader struct {
	Version    uint32 `json:"version"`
	Layer      int    `json:"layer"`
	Rank       int    `json:"rank"`
	TP         int    `json:"tp"`
	FirstRow   int64  `json:"first_row"`
	RowCount   int64  `json:"row_count"`
	RecordSize int64  `json:"record_size"`
	Tensor     string `json:"tensor"`
	Checkpoint string `json:"checkpoint"`
}

// PackedFileName is engram-l<L>-r<r>of<tp>.bin.
func PackedFileName(layer, rank, tp int) string {
	return fmt.Sprintf("engram-l%d-r%dof%d.bin", layer, rank, tp)
}

// FileSize is the size a complete packed file has.
func (h PackedHeader) FileSize() int64 { return PackedHeaderSize + h.RowCount*h.RecordSize }

// Marshal encodes the header into its fixed 4096 bytes.
func (h PackedHeader) Marshal() ([]byte, error) {
	if len(h.Tensor) > maxPackedString || len(h.Checkpoint) > maxPackedString {
		return nil, fmt.Errorf("packed header: tensor name or checkpoint id longer than %d bytes", maxPackedString)
	}
	b := make([]byte, PackedHeaderSize)
	copy(b[0:8], PackedMagic[:])
	le := binary.LittleEndian
	v := h.Version
	if v == 0 {
		v = PackedVersion
	}
	le.PutUint32(b[8:], v)
	le.PutUint32(b[12:], uint32(h.Layer))
	le.PutUint32(b[16:], uint32(h.Rank))
	le.PutUint32(b[20:], uint32(h.TP))
	le.PutUint64(b[24:], uint64(h.FirstRow))
	le.PutUint64(b[32:], uint64(h.RowCount))
	le.PutUint64(b[40:], uint64(h.RecordSize))
	off := 48
	for _, s := range []string{h.Tensor, h.Checkpoint} {
		le.PutUint16(b[off:], uint16(len(s)))
		off += 2
		copy(b[off:], s)
		off += len(s)
	}
	le.PutUint32(b[PackedHeaderSize-4:], crc32.ChecksumIEEE(b[:PackedHeaderSize-4]))
	return b, nil
}

// UnmarshalPackedHeader decodes and checks a header (magic, version, checksum).
func UnmarshalPackedHeader(b []byte) (PackedHeader, error) {
	var h PackedHeader
	if len(b) < PackedHeaderSize {
		return h, fmt.Errorf("packed header: %d bytes, need %d", len(b), PackedHeaderSize)
	}
	if !bytes.Equal(b[0:8], PackedMagic[:]) {
		return h, fmt.Errorf("packed header: bad magic %q", b[0:8])
	}
	le := binary.LittleEndian
	if got, want := le.Uint32(b[PackedHeaderSize-4:]), crc32.ChecksumIEEE(b[:PackedHeaderSize-4]); got != want {
		return h, fmt.Errorf("packed header: checksum %08x does not match content %08x", got, want)
	}
	h.Version = le.Uint32(b[8:])
	if h.Version != PackedVersion {
		return h, fmt.Errorf("packed header: format version %d, this sparklane reads %d", h.Version, PackedVersion)
	}
	h.Layer = int(le.Uint32(b[12:]))
	h.Rank = int(le.Uint32(b[16:]))
	h.TP = int(le.Uint32(b[20:]))
	h.FirstRow = int64(le.Uint64(b[24:]))
	h.RowCount = int64(le.Uint64(b[32:]))
	h.RecordSize = int64(le.Uint64(b[40:]))
	off := 48
	var strs [2]string
	for i := range strs {
		n := int(le.Uint16(b[off:]))
		off += 2
		if n > maxPackedString || off+n > PackedHeaderSize-4 {
			return h, fmt.Errorf("packed header: string field %d of %d bytes overruns the header", i, n)
		}
		strs[i] = string(b[off : off+n])
		off += n
	}
	h.Tensor, h.Checkpoint = strs[0], strs[1]
	return h, nil
}

// ReadPackedHeader reads and checks the header of a packed file, and that
// the file is as long as its header says.
func ReadPackedHeader(path string) (PackedHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return PackedHeader{}, err
	}
	return readPackedHeaderFile(f, path)
}

// readPackedHeaderFile is ReadPackedHeader on an open file, which it closes.
func readPackedHeaderFile(f *os.File, path string) (PackedHeader, error) {
	defer f.Close()
	b := make([]byte, PackedHeaderSize)
	if _, err := io.ReadFull(f, b); err != nil {
		return PackedHeader{}, fmt.Errorf("%s: read packed header: %w", path, err)
	}
	h, err := UnmarshalPackedHeader(b)
	if err != nil {
		return h, fmt.Errorf("%s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		return h, err
	}
	if st.Size() != h.FileSize() {
		return h, fmt.Errorf("%s: %d bytes, header says %d rows of %d bytes (%d bytes): truncated or overlong", path, st.Size(), h.RowCount, h.RecordSize, h.FileSize())
	}
	return h, nil
}
