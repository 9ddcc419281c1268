package control

import (
	"context"
	"fmt"
	"os"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/logging"
	"github.com/sparklane/sparklane/internal/tclient"
)

// Conn is a client's connection to the control plane: the Temporal client
// and where it reached it. The starter holds one and nothing else: it
// hosts no server and no worker, so killing it loses nothing.
type Conn struct {
	Client client.Client
	// Address is the frontend address dialed.
	Address string
	// UIURL is the web UI base URL, when known.
	UIURL string
}

// Close closes the client.
func (c *Conn) Close() {
	if c != nil && c.Client != nil {
		c.Client.Close()
	}
}

// DialOptions are the client options every connection of cfg uses: its
// namespace, TLS files and API key (read from the environment variable
// temporal.api_key_env names), the SDK's log through log.
func DialOptions(cfg *config.Config, log *zap.Logger) (tclient.DialOptions, error) {
	dial := tclient.DialOptions{Address: cfg.Temporal.Address, Namespace: cfg.Temporal.Namespace, TLSCert: cfg.Temporal.TLSCert, TLSKey: cfg.Temporal.TLSKey, TLSCA: cfg.Temporal.TLSCA, Logger: logging.SDK(log.Named("sdk"))}
	if cfg.Temporal.APIKeyEnv != "" {
		dial.APIKey = os.Getenv(cfg.Temporal.APIKeyEnv)
		if dial.APIKey == "" {
			return dial, fmt.Errorf("temporal.api_key_env names %s, but it is empty: export the API key in it", cfg.Temporal.APIKeyEnv)
		}
	}
	return dial, nil
}

// Dial connects to the Temporal frontend at address ("" : the config's
// temporal.address) with cfg's options.
func Dial(ctx context.Context, cfg *config.Config, log *zap.Logger, address, uiURL string) (*Conn, error) {
	dial, err := DialOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	if address != "" {
		dial.Address = address
	}
	c, err := tclient.Dial(ctx, dial)
	if err != nil {
		return nil, err
	}
	return &Conn{Client: c, Address: dial.Address, UIURL: uiURL}, nil
}
