package pki

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/testkit/loopnet"
)

// serve accepts one TLS connection at a time with server files, requiring
// a client certificate from the CA, and echoes a line.
func serve(t *testing.T, ca *CA, srv Files) string {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(srv.Cert, srv.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(ca.File)
	pool.AppendCertsFromPEM(b)
	l := tls.NewListener(loopnet.Listen(t), &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	loopnet.Serve(l, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 5)
		if _, err := io.ReadFull(c, buf); err == nil {
			_, _ = c.Write(buf)
		}
	})
	return l.Addr().String()
}

func dial(addr string, conf *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, conf)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		return err
	}
	buf := make([]byte, 5)
	_, err = io.ReadFull(c, buf)
	return err
}

// The CA, a server certificate for the frontend's address and a client
// certificate make a working mutual-TLS pair; a client without a
// certificate, or with one from another CA, is refused; issuing again
// keeps what exists.
func TestMutualTLSWithIssuedCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadOrCreateCA(dir, "sparklane test CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server("frontend", []string{"127.0.0.1", "temporal"})
	if err != nil {
		t.Fatal(err)
	}
	worker, err := ca.Client("node-dgx2")
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, ca, srv)
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(ca.File)
	pool.AppendCertsFromPEM(b)
	cert, err := tls.LoadX509KeyPair(worker.Cert, worker.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}); err != nil {
		t.Fatalf("client with a certificate from the CA: %v", err)
	}
	if err := dial(addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}); err == nil {
		t.Fatal("a client without a certificate got through")
	}
	other, err := LoadOrCreateCA(t.TempDir(), "someone else's CA")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.Client("stranger")
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := tls.LoadX509KeyPair(stranger.Cert, stranger.Key)
	if err := dial(addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{sc}, MinVersion: tls.VersionTLS12}); err == nil {
		t.Fatal("a client certificate from another CA got through")
	}
	// Keys are private; issuing again keeps the CA and the certificates.
	for _, f := range []string{worker.Key, srv.Key, dir + "/ca-key.pem"} {
		st, err := os.Stat(f)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v (%v), want 0600", f, st.Mode().Perm(), err)
		}
	}
	before, _ := os.ReadFile(ca.File)
	again, err := LoadOrCreateCA(dir, "sparklane test CA")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Client("node-dgx2"); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(ca.File)
	if string(before) != string(after) {
		t.Fatal("loading the CA again replaced it")
	}
	// A certificate in the way that the CA did not issue is named.
	if err := os.WriteFile(dir+"/intruder.pem", mustRead(t, stranger.Cert), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/intruder-key.pem", mustRead(t, stranger.Key), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Client("intruder"); err == nil || !strings.Contains(err.Error(), "was not issued by") {
		t.Fatalf("foreign certificate in the CA dir: %v", err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
