package relay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// badPeer is a peer given up on: when, and whether for wrong content
// (never tried again) or while one file tries it again.
type badPeer struct {
	at      time.Time
	wrong   bool
	probing bool
}

// giveUp stops using peer: for the rest of the block when it sent wrong
// content, else until RetryPeerAfter has passed.
func (p *pass) giveUp(peer, why string, wrong bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, known := p.bad[peer]
	if !known {
		b = &badPeer{}
		p.bad[peer] = b
	}
	b.at, b.probing, b.wrong = time.Now(), false, b.wrong || wrong
	if !known || p.failed[peer] != why {
		p.r.Log.Warn("relay: giving up on a peer; reading the NAS instead", zap.String("peer", peer), zap.String("why", why), zap.Bool("for_the_block", b.wrong))
	}
	p.failed[peer] = why
}

// peerOK reports whether a file may fetch from peer: one that was not
// given up on, or one that was gone or stalled long enough ago (one file
// at a time tries it again; peerBack clears it when that works).
func (p *pass) peerOK(peer string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, bad := p.bad[peer]
	if !bad {
		return true
	}
	if b.wrong || b.probing || time.Since(b.at) < p.r.RetryPeerAfter {
		return false
	}
	b.probing = true
	return true
}

// peerBack clears peer after a file came whole from it.
func (p *pass) peerBack(peer string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, bad := p.bad[peer]; bad {
		delete(p.bad, peer)
		p.r.Log.Info("relay: a peer given up on serves again", zap.String("peer", peer))
	}
}

// stallReader ends a stream whose next bytes take longer than the stall
// timeout.
type stallReader struct {
	body   io.ReadCloser
	timer  *time.Timer
	stall  time.Duration
	cancel context.CancelFunc
}

func (s *stallReader) Read(b []byte) (int, error) {
	s.timer.Reset(s.stall)
	n, err := s.body.Read(b)
	s.timer.Stop() // time spent writing and fsyncing is not the peer's
	return n, err
}

func (s *stallReader) Close() error {
	s.timer.Stop()
	s.cancel()
	return s.body.Close()
}

// open asks peer for rel from off on.
func (p *pass) open(ctx context.Context, peer, rel string, off int64) (io.ReadCloser, error) {
	addr, ok := p.job.Peers[peer]
	if !ok || addr == "" {
		return nil, fmt.Errorf("no relay address for peer %s", peer)
	}
	u := url.URL{Scheme: "https", Host: addr, Path: "/v1/file", RawQuery: url.Values{
		"block": {p.job.Key}, "path": {rel}, "off": {strconv.FormatInt(off, 10)},
	}.Encode()}
	sctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, u.String(), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := p.r.client.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("fetch %s from %s (%s): %w", rel, peer, addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("fetch %s from %s (%s): %s: %s", rel, peer, addr, resp.Status, b)
	}
	t := time.AfterFunc(p.r.StallTimeout, cancel)
	return &stallReader{body: resp.Body, timer: t, stall: p.r.StallTimeout, cancel: cancel}, nil
}
