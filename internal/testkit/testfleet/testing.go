package testfleet

import (
	"context"
	"testing"
	"time"
)

// New brings a fleet up for a test and removes it when the test ends,
// also when it fails or panics (t.Cleanup). It fails the test, never skips,
// when the machine lacks a part.
func New(t testing.TB, opts Options) *Fleet {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, err := Up(ctx, opts)
	if err != nil {
		t.Fatalf("testfleet up: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("testfleet close: %v", err)
		}
	})
	return f
}
