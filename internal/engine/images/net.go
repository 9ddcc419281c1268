package images

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sparklane/sparklane/internal/pki"
)

// Listener is a chain member's server for its one downstream node: bound
// on the node's fleet address for the transfer only, TLS 1.3 with the
// fleet CA, serving exactly one connection from the expected node.
type Listener struct {
	ln   net.Listener
	tlsC *tls.Config
	peer string
}

// Listen binds addr with tlsConf, which must require and verify client
// certificates; Accept then takes only node peer's connection.
func Listen(addr string, tlsConf *tls.Config, peer string) (*Listener, error) {
	if tlsConf == nil || tlsConf.ClientAuth != tls.RequireAndVerifyClientCert || tlsConf.ClientCAs == nil {
		return nil, errors.New("image transfer: a TLS config requiring verified client certificates is mandatory (relay.ServerTLS makes one)")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("image transfer: listen on %s (the node's address and image_port): %w", addr, err)
	}
	return &Listener{ln: ln, tlsC: tlsConf, peer: peer}, nil
}

// Addr is the bound address.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Close unbinds.
func (l *Listener) Close() error { return l.ln.Close() }

// Accept waits (until ctx ends or wait passes) for the downstream node's
// connection; a connection with any other certificate is closed and
// waited past.
func (l *Listener) Accept(ctx context.Context, wait time.Duration) (*tls.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { l.ln.Close() })
	defer stop()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("image transfer: node %s did not connect to %s within %s", l.peer, l.Addr(), wait)
			}
			return nil, fmt.Errorf("image transfer: accept on %s: %w", l.Addr(), err)
		}
		tc := tls.Server(c, l.tlsC)
		hctx, hcancel := context.WithTimeout(ctx, 30*time.Second)
		err = tc.HandshakeContext(hctx)
		hcancel()
		if err == nil {
			certs := tc.ConnectionState().PeerCertificates
			if len(certs) > 0 && certs[0].Subject.CommonName == pki.FleetPeerPrefix+l.peer {
				return tc, nil
			}
		}
		c.Close()
	}
}

// Dial connects to the upstream node at addr, retrying while it is not
// yet listening (its activity starts beside this one) until ctx ends or
// wait passes. tlsConf verifies the server against the fleet CA.
func Dial(ctx context.Context, addr string, tlsConf *tls.Config, upstream string, wait time.Duration) (*tls.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("image transfer: upstream %s address %q: %w", upstream, addr, err)
	}
	c := tlsConf.Clone()
	c.ServerName = host
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	d := tls.Dialer{Config: c}
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.(*tls.Conn), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("image transfer: node %s at %s not reachable within %s: %w", upstream, addr, wait, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
