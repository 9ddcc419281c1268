package syncbuf

import (
	"fmt"
	"sync"
	"testing"
)

func TestConcurrentWritesAllKept(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(&b, "line %d\n", i)
			_ = b.String()
		}()
	}
	wg.Wait()
	if got := b.Lines(); len(got) != 8 {
		t.Fatalf("Lines() = %q, want 8 lines", got)
	}
}
