package ledger

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"testing"
)

// SampleBytes (in memory, no copy) must give SampleHash's answer for every
// size, or a small file staged from memory would fail its next check.
func TestSampleBytesMatchesSampleHash(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	limit := HeadBytes + TailBytes + SpreadSamples*SpreadBytes
	for _, n := range []int{0, 1, 8192, 256 << 10, 256<<10 + 1, int(limit), int(limit) + 1, 5 << 20} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		want, err := SampleHash(bytes.NewReader(data), int64(n))
		if err != nil {
			t.Fatalf("SampleHash(%d bytes): %v", n, err)
		}
		if got := SampleBytes(data); got != want {
			t.Fatalf("%d bytes: SampleBytes %s, SampleHash %s", n, got, want)
		}
	}
}

// The pooled read buffer is reused: sampling many regions must not
// allocate a fresh 256 KiB buffer each time (that was the verify pass's
// main cost on many small files).
func TestSampleRegionReusesItsBuffer(t *testing.T) {
	data := bytes.Repeat([]byte{1}, 8192)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := SampleHash(bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
	})
	// sha256 state, the reader and the hex string; never the 256 KiB buffer.
	if allocs > 8 {
		t.Fatalf("SampleHash of 8 KiB made %.0f allocations a call; want the pooled buffer", allocs)
	}
	var ms, me runtimeMem
	ms.read()
	for i := 0; i < 100; i++ {
		SampleHash(bytes.NewReader(data), int64(len(data)))
	}
	me.read()
	if d := me.total - ms.total; d > 100*(64<<10) {
		t.Fatalf("100 samples of 8 KiB allocated %d bytes; a 256 KiB buffer per call would be %d", d, 100*(256<<10))
	}
}

type runtimeMem struct{ total uint64 }

func (m *runtimeMem) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.total = s.TotalAlloc
}
