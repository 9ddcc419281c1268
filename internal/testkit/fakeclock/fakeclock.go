package fakeclock

import (
	"context"
	"sync"
	"time"
)

// Clock is a fake time: Sleep adds to it and returns at once (or with
// ctx's error when ctx has ended). It is safe for concurrent use; sleeps
// of concurrent callers add up, so with several callers only a lower
// bound on Slept means anything.
type Clock struct {
	mu     sync.Mutex
	t      time.Time
	slept  time.Duration
	sleeps int
	// OnSleep, when set, runs after each sleep with its count (1, 2, …),
	// outside the clock's lock: a test changes the world there (the
	// memory a paused pass waits for, a context it cancels).
	OnSleep func(n int)
}

// New returns a clock at a fixed instant.
func New() *Clock { return &Clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Sleep moves the clock on by d.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.slept += d
	c.sleeps++
	n, f := c.sleeps, c.OnSleep
	c.mu.Unlock()
	if f != nil {
		f(n)
	}
	return nil
}

// Slept is the total of every Sleep so far.
func (c *Clock) Slept() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept
}
