package relay

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Identity is a node's relay identity: the fleet CA and the node's own
// certificate and key ("relay-NODE", issued by pki.CA.Peer for the node's
// fleet address), all PEM files on the node. Key material stays in files;
// only these paths are ever passed around.
type Identity struct {
	// CA is the fleet CA certificate both sides trust.
	CA string
	// Cert and Key are the node's certificate (server and client use) and
	// its private key.
	Cert, Key string
}

func (id Identity) load() (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(id.Cert, id.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("relay identity %s / %s: %w: issue it with the fleet CA (starter fleet install does)", id.Cert, id.Key, err)
	}
	pem, err := os.ReadFile(id.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("relay CA %s: %w", id.CA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("relay CA %s holds no PEM certificate", id.CA)
	}
	return cert, pool, nil
}

// ServerTLS is the relay server's TLS: TLS 1.3, the node's certificate,
// and a verified client certificate from the fleet CA required on every
// connection.
func ServerTLS(id Identity) (*tls.Config, error) {
	c, pool, err := id.config()
	if err != nil {
		return nil, err
	}
	c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, pool
	return c, nil
}

// ClientTLS is the receiver's TLS: the node's certificate as its client
// identity, and peers' server certificates verified against the fleet CA
// (the peer's address must be in its certificate).
func ClientTLS(id Identity) (*tls.Config, error) {
	c, pool, err := id.config()
	if err != nil {
		return nil, err
	}
	c.RootCAs = pool
	return c, nil
}

// config is what both sides' TLS share: TLS 1.3 and the node's
// certificate; pool holds the fleet CA, which each side trusts for the
// other's certificate.
func (id Identity) config() (c *tls.Config, pool *x509.CertPool, err error) {
	cert, pool, err := id.load()
	if err != nil {
		return nil, nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}, pool, nil
}
