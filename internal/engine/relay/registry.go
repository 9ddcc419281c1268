package relay

import (
	"os"
	"sync"
	"time"
)

// Registry is what one node can serve to its peers: per block, the files
// it has planned, and for each how far its copy is written and fsynced. The
// node's receiver fills it; its Server reads it. One per node worker.
type Registry struct {
	mu     sync.Mutex
	blocks map[string]*block
	wake   chan struct{} // closed and replaced when a block is registered
	// Linger is how long a finished block stays served, so peers further
	// down a chain, or one resuming after an outage, can still read from
	// this node (default 1 h).
	Linger time.Duration
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{blocks: map[string]*block{}, wake: make(chan struct{}), Linger: time.Hour}
}

type block struct {
	files map[string]*entry
	timer *time.Timer
}

type entryState int

const (
	statePending entryState = iota
	stateReceiving
	stateDone
	stateFailed
)

// entry is one file a node has or will have. Readers wait on wake, which
// is closed and replaced on every change.
type entry struct {
	mu     sync.Mutex
	state  entryState
	f      *os.File // read-only descriptor of the temp file (stays valid after its rename)
	synced int64    // bytes written and fsynced
	size   int64
	gen    int // bumped when the copy restarts: streams of an older generation end
	wake   chan struct{}
}

func (e *entry) changed() {
	close(e.wake)
	e.wake = make(chan struct{})
}

// register makes key's files servable (pending) and returns them; a block
// registered again (a retried attempt) replaces the old one.
func (r *Registry) register(key string, files map[string]int64) map[string]*entry {
	es := make(map[string]*entry, len(files))
	for rel, size := range files {
		es[rel] = &entry{size: size, wake: make(chan struct{})}
	}
	r.mu.Lock()
	if old := r.blocks[key]; old != nil {
		r.closeLocked(old)
	}
	r.blocks[key] = &block{files: es}
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
	return es
}

// finish fails what was never delivered (peers stop waiting for it) and
// drops the block after Linger.
func (r *Registry) finish(key string, es map[string]*entry) {
	for _, e := range es {
		e.mu.Lock()
		if e.state == statePending || e.state == stateReceiving {
			e.state = stateFailed
			e.changed()
		}
		e.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.blocks[key]
	if b == nil || !sameFiles(b.files, es) {
		return
	}
	b.timer = time.AfterFunc(r.Linger, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.blocks[key] == b {
			delete(r.blocks, key)
			r.closeLocked(b)
		}
	})
}

func sameFiles(a, b map[string]*entry) bool {
	for k, v := range a {
		return b[k] == v
	}
	return len(b) == 0
}

func (r *Registry) closeLocked(b *block) {
	if b.timer != nil {
		b.timer.Stop()
	}
	for _, e := range b.files {
		e.mu.Lock()
		if e.f != nil {
			e.f.Close()
			e.f = nil
		}
		if e.state != stateDone {
			e.state = stateFailed
		}
		e.changed()
		e.mu.Unlock()
	}
}

// Close drops every block (the worker is stopping).
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, b := range r.blocks {
		delete(r.blocks, k)
		r.closeLocked(b)
	}
}

// lookup returns key's entry for rel, waiting until the block is
// registered or the deadline passes. ok is false when the block is not
// registered in time or rel is not planned on this node.
func (r *Registry) lookup(key, rel string, deadline <-chan time.Time, done <-chan struct{}) (*entry, bool) {
	for {
		r.mu.Lock()
		b, wake := r.blocks[key], r.wake
		r.mu.Unlock()
		if b != nil {
			e, ok := b.files[rel]
			return e, ok
		}
		select {
		case <-wake:
		case <-deadline:
			return nil, false
		case <-done:
			return nil, false
		}
	}
}

// start: the copy of e begins (or restarts) with synced bytes already on
// disk, readable through f.
func (e *entry) start(f *os.File, synced int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.f != nil && e.f != f {
		e.f.Close()
	}
	e.f, e.synced, e.state = f, synced, stateReceiving
	e.gen++
	e.changed()
}

// advance: bytes up to synced are written and fsynced.
func (e *entry) advance(synced int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.synced = synced
	e.changed()
}

// done: the file is whole, verified and in place (f reads it).
func (e *entry) done(f *os.File) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f != nil && e.f != f {
		if e.f != nil {
			e.f.Close()
		}
		e.f = f
	}
	e.synced, e.state = e.size, stateDone
	e.changed()
}

// fail: this node will not have the file; peers stop waiting for it.
func (e *entry) fail() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != stateDone {
		e.state = stateFailed
		e.gen++
		e.changed()
	}
}
