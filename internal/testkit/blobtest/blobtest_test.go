package blobtest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sparklane/sparklane/internal/engine/ledger"
)

// The other version of a blob is another blob to sha256 and the same one
// to the ledger's samples; rewriting a file in place keeps its inode.
func TestOtherVersionAndRewrite(t *testing.T) {
	const size = 32 << 18
	good := Data(1, size)
	if !bytes.Equal(good, Data(1, size)) || bytes.Equal(good, Data(2, size)) {
		t.Fatal("Data is not deterministic per seed")
	}
	bad := OtherVersion(t, good, 24<<18)
	if SHAHex(bad) == SHAHex(good) || ledger.SampleBytes(bad) != ledger.SampleBytes(good) || len(bad) != len(good) {
		t.Fatal("the other version is not another blob with the same samples")
	}
	p := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(p, good, 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(p)
	RewriteInPlace(t, p, bad)
	after, _ := os.Stat(p)
	got, _ := os.ReadFile(p)
	if !bytes.Equal(got, bad) || !os.SameFile(before, after) {
		t.Fatal("RewriteInPlace did not write the new bytes over the same file")
	}
}
