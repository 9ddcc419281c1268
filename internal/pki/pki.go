package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Validity of issued certificates; the CA outlives them.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	CertValidity = 2 * 365 * 24 * time.Hour
)

// Files are the PEM files of one issued identity.
type Files struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// CA is a loaded certificate authority.
type CA struct {
	Dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate's path (what servers and clients trust).
	File string
}

// LoadOrCreateCA returns the CA in dir (ca.pem, ca-key.pem), creating it
// when absent.
func LoadOrCreateCA(dir, name string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: create %s: %w", dir, err)
	}
	certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if _, err := os.Stat(certFile); err == nil {
		cert, key, err := load(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		if !cert.IsCA {
			return nil, fmt.Errorf("pki: %s is not a CA certificate: move it away or choose another --dir", certFile)
		}
		return &CA{Dir: dir, cert: cert, key: key, File: certFile}, nil
	}
	key, tmpl, err := newKey(name, CAValidity)
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	tmpl.BasicConstraintsValid, tmpl.IsCA, tmpl.MaxPathLenZero = true, true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	if err := write(certFile, keyFile, der, key); err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Dir: dir, cert: cert, key: key, File: certFile}, nil
}

// Server issues (or keeps) NAME.pem for a server answering at hosts (DNS
// names or IP addresses).
func (ca *CA) Server(name string, hosts []string) (Files, error) {
	if len(hosts) == 0 {
		return Files{}, errors.New("pki: a server certificate needs at least one host name or address")
	}
	return ca.issue(name, hosts, x509.ExtKeyUsageServerAuth)
}

// Client issues (or keeps) NAME.pem for a client identity (a node's worker,
// the control service, an operator's starter).
func (ca *CA) Client(name string) (Files, error) {
	return ca.issue(name, nil, x509.ExtKeyUsageClientAuth)
}

// Peer issues (or keeps) NAME.pem for a fleet node that is both a server
// and a client of its peers (the staging relay's mTLS: every node serves
// what it staged and fetches from the others), answering at hosts.
func (ca *CA) Peer(name string, hosts []string) (Files, error) {
	if len(hosts) == 0 {
		return Files{}, errors.New("pki: a peer certificate needs at least one host name or address")
	}
	return ca.issue(name, hosts, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(name string, hosts []string, usage ...x509.ExtKeyUsage) (Files, error) {
	f := Files{Cert: filepath.Join(ca.Dir, name+".pem"), Key: filepath.Join(ca.Dir, name+"-key.pem")}
	if _, err := os.Stat(f.Cert); err == nil {
		cert, _, err := load(f.Cert, f.Key)
		if err != nil {
			return f, err
		}
		if err := cert.CheckSignatureFrom(ca.cert); err != nil {
			return f, fmt.Errorf("pki: %s was not issued by %s: remove it to issue a new one", f.Cert, ca.File)
		}
		return f, nil
	}
	key, tmpl, err := newKey(name, CertValidity)
	if err != nil {
		return f, err
	}
	tmpl.KeyUsage, tmpl.ExtKeyUsage = x509.KeyUsageDigitalSignature, usage
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return f, err
	}
	return f, write(f.Cert, f.Key, der, key)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func write(certFile, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return fmt.Errorf("pki: write %s: %w", keyFile, err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("pki: write %s: %w", certFile, err)
	}
	return nil
}

func load(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: read %s: %w", certFile, err)
	}
	b, _ := pem.Decode(cb)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("pki: %s holds no PEM certificate", certFile)
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: parse %s: %w", certFile, err)
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: read %s: %w", keyFile, err)
	}
	k, _ := pem.Decode(kb)
	if k == nil {
		return nil, nil, fmt.Errorf("pki: %s holds no PEM key", keyFile)
	}
	key, err := x509.ParseECPrivateKey(k.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: parse %s: %w", keyFile, err)
	}
	return cert, key, nil
}

// newKey is a fresh P-256 key and the template of a certificate for it
// named name (organization sparklane), valid from an hour ago (clock skew
// between nodes) for validity.
func newKey(name string, validity time.Duration) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	return key, &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"sparklane"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validity),
	}, nil
}

// FleetPeerPrefix starts the common name of a node's fleet identity
// (FleetPeerPrefix+NODE): the mTLS identity nodes present to each other for
// the staging relay and image transfers. The name predates image transfers,
// so certificates already issued keep working.
const FleetPeerPrefix = "relay-"

// FleetDir is where the fleet CA and the nodes' identities live:
// STATE_DIR/pki (the same CA `starter control certs` keeps).
func FleetDir(stateDir string) string { return filepath.Join(stateDir, "pki") }

// FleetIdentity is node's identity files under dir: the fleet CA's
// certificate and the node's FleetPeerPrefix+NODE pair.
func FleetIdentity(dir, node string) Files {
	return Files{Cert: filepath.Join(dir, FleetPeerPrefix+node+".pem"), Key: filepath.Join(dir, FleetPeerPrefix+node+"-key.pem")}
}

// CAFile is the fleet CA's certificate under dir.
func CAFile(dir string) string { return filepath.Join(dir, "ca.pem") }

// FleetHost is a node a fleet identity is issued for: its name and the
// address its peers reach it at.
type FleetHost struct{ Name, Address string }

// IssueFleetIdentities issues (or keeps) the fleet identity of each host
// with an address from the CA under dir (created when absent). Every node
// with an address gets one, whatever the relay setting: image transfers
// between nodes need it too.
func IssueFleetIdentities(dir string, hosts []FleetHost) (map[string]Files, error) {
	out := map[string]Files{}
	var ca *CA
	for _, h := range hosts {
		if h.Address == "" {
			continue
		}
		if ca == nil {
			var err error
			if ca, err = LoadOrCreateCA(dir, "sparklane fleet CA"); err != nil {
				return nil, err
			}
		}
		f, err := ca.Peer(FleetPeerPrefix+h.Name, []string{h.Address})
		if err != nil {
			return nil, fmt.Errorf("fleet identity of node %s: %w", h.Name, err)
		}
		out[h.Name] = f
	}
	return out, nil
}
