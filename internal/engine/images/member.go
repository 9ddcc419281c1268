package images

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"time"
)

// Member is one node's part in a chain transfer: the source sends, every
// other member receives from its upstream, and a member with a downstream
// forwards the stream to it while loading it.
type Member struct {
	Docker Docker
	Node   string
	Spec   Spec
	// Have is how many of the image's layers this node has (receivers).
	Have int
	// Upstream and UpstreamAddr name the node this one receives from
	// (empty for the source); Downstream the node it serves ("" none).
	Upstream, UpstreamAddr, Downstream string
	// ListenAddr is this node's address:image_port, bound only while
	// Run serves its downstream.
	ListenAddr string
	// ServerTLS requires the fleet CA's client certificates; ClientTLS
	// verifies the upstream against the fleet CA.
	ServerTLS, ClientTLS *tls.Config
	// Wait bounds the wait for the peers to connect or be reachable.
	Wait time.Duration
	// Spool is where a receiver keeps the stream's files until their
	// layer is loaded ("": the system's temporary directory).
	Spool string
	// Durable, when set (a test's fault point; nil in production), runs
	// after a receiver made the image's first layers durable (a helper
	// tag holds them); an error it returns ends the receive there, as a
	// killed worker would.
	Durable func(spec Spec, layers int) error
}

// Moved is what one member's transfer moved.
type Moved struct {
	Node string `json:"node"`
	// BytesIn is what it received (0 for the source), BytesOut what it
	// sent to its downstream.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// Layers is how many layer files the stream carried.
	Layers int `json:"layers"`
}

// Run does the member's part: bind for the downstream (when there is
// one) and wait for it, then send (the source) or receive from upstream,
// forwarding; the listener is closed when Run returns.
func (m Member) Run(ctx context.Context) (Moved, error) {
	out := Moved{Node: m.Node}
	if m.Wait <= 0 {
		m.Wait = 5 * time.Minute
	}
	var down io.Writer
	var cw *countWriter
	if m.Downstream != "" {
		l, err := Listen(m.ListenAddr, m.ServerTLS, m.Downstream)
		if err != nil {
			return out, fmt.Errorf("node %s: %w", m.Node, err)
		}
		defer l.Close()
		c, err := l.Accept(ctx, m.Wait)
		if err != nil {
			return out, fmt.Errorf("node %s: %w", m.Node, err)
		}
		l.Close() // one downstream: unbind now
		defer c.Close()
		cw = &countWriter{w: c}
		down = cw
	}
	if m.Upstream == "" {
		if down == nil {
			return out, nil // the source of a chain with no one to send to
		}
		n, err := Send(ctx, m.Docker, m.Spec, down)
		out.BytesOut = n
		if err != nil {
			return out, fmt.Errorf("node %s: send image %s to %s: %w", m.Node, m.Spec.Tag, m.Downstream, err)
		}
		return out, nil
	}
	up, err := Dial(ctx, m.UpstreamAddr, m.ClientTLS, m.Upstream, m.Wait)
	if err != nil {
		return out, fmt.Errorf("node %s: %w", m.Node, err)
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { up.Close() })
	defer stop()
	rc := receiver{d: m.Docker, spec: m.Spec, have: m.Have, from: "node " + m.Upstream, spool: m.Spool, durable: m.Durable}
	got, err := rc.run(ctx, up, down)
	out.BytesIn, out.Layers = got.Bytes, got.Layers
	if cw != nil {
		out.BytesOut = cw.n
	}
	if err != nil {
		return out, fmt.Errorf("node %s: %w", m.Node, err)
	}
	return out, nil
}
