package pgtest

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"

	"github.com/sparklane/sparklane/internal/devserver/searchattr"
	"github.com/sparklane/sparklane/internal/pki"
	"github.com/sparklane/sparklane/internal/tclient"
)

// A Temporal server on a real PostgreSQL, its frontend behind mutual TLS:
// a client with a certificate from the CA reaches the namespace and finds
// sparklane's search attributes; one without a certificate is refused.
func TestTemporalOnPostgresWithMTLS(t *testing.T) {
	ca, err := pki.LoadOrCreateCA(filepath.Join(t.TempDir(), "pki"), "pgtest CA")
	if err != nil {
		t.Fatal(err)
	}
	srvID, err := ca.Server("frontend", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.Client("control")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pg := Start(t, Options{})
	t.Logf("PostgreSQL up on %s in %v", pg.Addr(), time.Since(start))
	start = time.Now()
	s := StartTemporal(t, pg, TemporalOptions{TLS: &TLS{CA: ca.File, ServerCert: srvID.Cert, ServerKey: srvID.Key, ClientCert: cli.Cert, ClientKey: cli.Key}})
	t.Logf("Temporal up on %s in %v", s.Address, time.Since(start))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := tclient.Dial(ctx, tclient.DialOptions{Address: s.Address, Namespace: s.Namespace, TLSCA: ca.File, TLSCert: cli.Cert, TLSKey: cli.Key})
	if err != nil {
		t.Fatalf("dial with the client certificate: %v", err)
	}
	defer c.Close()
	sa, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: s.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	for name := range searchattr.Definitions() {
		if _, ok := sa.GetCustomAttributes()[name]; !ok {
			t.Errorf("search attribute %s not registered: %v", name, sa.GetCustomAttributes())
		}
	}
	if _, err := tclient.Dial(ctx, tclient.DialOptions{Address: s.Address, Namespace: s.Namespace, TLSCA: ca.File, Timeout: 3 * time.Second}); err == nil {
		t.Fatal("a client without a certificate reached the frontend")
	} else if !strings.Contains(err.Error(), s.Address) {
		t.Errorf("refusal does not name the frontend: %v", err)
	}
}
