package tclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults used when DialOptions leaves a field empty: the embedded
// server's frontend address and namespace.
const (
	DefaultAddress   = "127.0.0.1:7233"
	DefaultNamespace = "default"
	DefaultTimeout   = 5 * time.Second
)

// DialOptions says where the Temporal frontend is and how to authenticate.
// The fields mirror the `[temporal]` config table so callers copy them over.
type DialOptions struct {
	// Address is host:port of the frontend (temporal.address); empty means
	// DefaultAddress.
	Address string
	// Namespace is checked to exist at dial time (temporal.namespace);
	// empty means DefaultNamespace.
	Namespace string
	// TLSCert and TLSKey are PEM file paths for mTLS (temporal.tls_cert,
	// temporal.tls_key); both or neither.
	TLSCert string
	TLSKey  string
	// TLSCA is a PEM file of CA certificates to trust instead of the system
	// roots (temporal.tls_ca); it turns TLS on by itself.
	TLSCA string
	// APIKey is a Temporal Cloud API key (read by the caller from the
	// variable named in temporal.api_key_env); it turns TLS on.
	APIKey string
	// Logger receives the SDK's logs (see logging.SDK); nil keeps the SDK
	// default.
	Logger log.Logger
	// Timeout bounds the connection check; zero means DefaultTimeout.
	Timeout time.Duration
	// MetricsHandler receives the SDK's metrics (workers pass their
	// Prometheus registry's, internal/metrics); nil records none.
	MetricsHandler client.MetricsHandler
}

// Dial connects to the frontend, checks the namespace exists and returns
// the client. Every failure to reach the server is a single line naming the
// address, the namespace and the cause, plus how to fix it.
func Dial(ctx context.Context, opt DialOptions) (client.Client, error) {
	if opt.Address == "" {
		opt.Address = DefaultAddress
	}
	if opt.Namespace == "" {
		opt.Namespace = DefaultNamespace
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	tlsConf, err := tlsConfig(opt)
	if err != nil {
		return nil, err
	}
	co := client.Options{
		HostPort:  opt.Address,
		Namespace: opt.Namespace,
		Logger:    opt.Logger,
		// A nil handler is the SDK's no-op one.
		MetricsHandler: opt.MetricsHandler,
		ConnectionOptions: client.ConnectionOptions{
			TLS:                  tlsConf,
			GetSystemInfoTimeout: opt.Timeout,
		},
	}
	if opt.APIKey != "" {
		co.Credentials = client.NewAPIKeyStaticCredentials(opt.APIKey)
	}

	dctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	defer cancel()
	c, err := client.DialContext(dctx, co)
	if err != nil {
		return nil, unreachable(opt, err)
	}
	_, err = c.WorkflowService().DescribeNamespace(dctx, &workflowservice.DescribeNamespaceRequest{Namespace: opt.Namespace})
	if err != nil {
		c.Close()
		var nf *serviceerror.NamespaceNotFound
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("temporal: namespace %q does not exist on %s: create it (temporal operator namespace create --namespace %s --address %s) or fix temporal.namespace",
				opt.Namespace, opt.Address, opt.Namespace, opt.Address)
		}
		return nil, unreachable(opt, err)
	}
	return c, nil
}

// unreachable formats the one-line "cannot reach" error.
func unreachable(opt DialOptions, err error) error {
	return fmt.Errorf("temporal: cannot reach %s (namespace %s): %s. Start the embedded server with 'go run ./worker dev', or set temporal.address to your cluster (see docker-compose.temporal.yml)",
		opt.Address, opt.Namespace, reason(err, opt.Timeout))
}

// reason boils a gRPC dial error down to its cause: the SDK's message nests
// three layers of "connection error: desc = transport: ..." around it.
func reason(err error, timeout time.Duration) string {
	msg := err.Error()
	for _, known := range []string{
		"connection refused", "no such host", "network is unreachable",
		"no route to host", "connection reset by peer", "certificate", "tls:",
		"first record does not look like a TLS handshake",
	} {
		if i := strings.Index(msg, known); i >= 0 {
			if known == "certificate" || known == "tls:" {
				// Keep the TLS detail, it says which check failed.
				return "TLS handshake failed: " + oneLine(strings.Trim(msg[i:], `"`))
			}
			return known
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded ||
		strings.Contains(msg, "context deadline exceeded") {
		return fmt.Sprintf("no answer within %s", timeout)
	}
	if s, ok := status.FromError(err); ok && s.Message() != "" {
		return oneLine(s.Code().String() + ": " + s.Message())
	}
	return oneLine(msg)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// tlsConfig builds the client TLS config from file paths; nil means
// plaintext (the embedded server and the compose cluster).
func tlsConfig(opt DialOptions) (*tls.Config, error) {
	if (opt.TLSCert == "") != (opt.TLSKey == "") {
		return nil, fmt.Errorf("temporal: temporal.tls_cert (%q) and temporal.tls_key (%q) must be set together", opt.TLSCert, opt.TLSKey)
	}
	if opt.TLSCert == "" && opt.TLSCA == "" && opt.APIKey == "" {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if opt.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(opt.TLSCert, opt.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("temporal: load client certificate temporal.tls_cert=%s temporal.tls_key=%s: %w", opt.TLSCert, opt.TLSKey, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	if opt.TLSCA != "" {
		pem, err := os.ReadFile(opt.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("temporal: read temporal.tls_ca %s: %w", opt.TLSCA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("temporal: temporal.tls_ca %s holds no PEM certificate", opt.TLSCA)
		}
		conf.RootCAs = pool
	}
	return conf, nil
}
