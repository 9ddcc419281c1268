package config

import (
	"fmt"
	"net"
	"path/filepath"
	"time"
)

// Gateway is a [gateway] table (or one of [[gateways]]): the lanes' one
// client-facing address (`worker gateway`, internal/gateway). Zero fields
// take the defaults (Gateway.WithDefaults).
type Gateway struct {
	// Name names one of several [[gateways]] (its queue gateway.NAME); the
	// one [gateway] has none (queue gateway).
	Name string `mapstructure:"name" json:"name,omitempty"`
	// Listen is host:port (default 127.0.0.1:8080); a listen address
	// beyond loopback needs api_keys_file or allow_anonymous = true.
	Listen string `mapstructure:"listen" json:"listen,omitempty"`
	// TLSCert and TLSKey, both or neither, serve HTTPS.
	TLSCert string `mapstructure:"tls_cert" json:"tls_cert,omitempty"`
	TLSKey  string `mapstructure:"tls_key" json:"tls_key,omitempty"`
	// APIKeysFile holds one key a line as "sha256:HEX [name,name...]"
	// (the hash of the key, and optionally the model names it may ask
	// for); keys themselves are never stored.
	APIKeysFile    string `mapstructure:"api_keys_file" json:"api_keys_file,omitempty"`
	AllowAnonymous bool   `mapstructure:"allow_anonymous" json:"allow_anonymous,omitempty"`
	// HoldTimeout and MaxHeld bound the requests held through a switch;
	// past either a request gets 503 with Retry-After.
	HoldTimeout time.Duration `mapstructure:"hold_timeout" json:"hold_timeout,omitempty" min:"1s"`
	MaxHeld     int           `mapstructure:"max_held" json:"max_held,omitempty"`
	// DrainTimeout is how long a lane's requests in flight may run on
	// once it drains before it stops (streams included).
	DrainTimeout time.Duration `mapstructure:"drain_timeout" json:"drain_timeout,omitempty" min:"1s"`
	// MaxBody bounds a request's body (413 past it).
	MaxBody int64 `mapstructure:"max_body" json:"max_body,omitempty" unit:"bytes"`
	// Wake: a request for a cluster off by schedule starts its power-on
	// and is held, instead of a 503.
	Wake bool `mapstructure:"wake" json:"wake,omitempty"`
	// Clusters are the clusters this gateway fronts (default every one).
	Clusters []string `mapstructure:"clusters" json:"clusters,omitempty"`
	// MetricsAddress is where the gateway's process serves its
	// Prometheus metrics (default 127.0.0.1:9465; "off": nowhere): the
	// control service's metrics_address is another process's.
	MetricsAddress string `mapstructure:"metrics_address" json:"metrics_address,omitempty"`
}

// Gateway defaults.
const (
	DefaultGatewayListen       = "127.0.0.1:8080"
	DefaultGatewayHoldTimeout  = 10 * time.Minute
	DefaultGatewayMaxHeld      = 1024
	DefaultGatewayDrainTimeout = 120 * time.Second
	DefaultGatewayMaxBody      = 32 << 20
	DefaultGatewayMetrics      = "127.0.0.1:9465"
)

// WithDefaults is g with every zero field at its default.
func (g Gateway) WithDefaults() Gateway {
	if g.Listen == "" {
		g.Listen = DefaultGatewayListen
	}
	if g.HoldTimeout == 0 {
		g.HoldTimeout = DefaultGatewayHoldTimeout
	}
	if g.MaxHeld == 0 {
		g.MaxHeld = DefaultGatewayMaxHeld
	}
	if g.DrainTimeout == 0 {
		g.DrainTimeout = DefaultGatewayDrainTimeout
	}
	if g.MaxBody == 0 {
		g.MaxBody = DefaultGatewayMaxBody
	}
	if g.MetricsAddress == "" {
		g.MetricsAddress = DefaultGatewayMetrics
	}
	return g
}

// Gateways are the config's gateways with their defaults: the one
// [gateway] (named "") or each of [[gateways]].
func (c *Config) Gateways() []Gateway {
	var out []Gateway
	if c.Gateway != nil {
		out = append(out, c.Gateway.WithDefaults())
	}
	for _, g := range c.GatewayList {
		out = append(out, g.WithDefaults())
	}
	return out
}

// FindGateway is the gateway named name ("": the [gateway] table), nil
// when the config has none by that name.
func (c *Config) FindGateway(name string) *Gateway {
	for _, g := range c.Gateways() {
		if g.Name == name {
			return &g
		}
	}
	return nil
}

// Fronts reports whether g fronts cluster.
func (g Gateway) Fronts(cluster string) bool {
	if len(g.Clusters) == 0 {
		return true
	}
	for _, c := range g.Clusters {
		if c == cluster {
			return true
		}
	}
	return false
}

// gatewayErrors checks the [gateway] / [[gateways]] tables.
func gatewayErrors(cfg *Config) []error {
	var errs []error
	if cfg.Gateway != nil && len(cfg.GatewayList) > 0 {
		errs = append(errs, cfgErr(cfg, "gateway", "both [gateway] and [[gateways]]: name every gateway in [[gateways]], or keep one [gateway]"))
	}
	seen := map[string]int{}
	for i, g := range cfg.Gateways() {
		key := "gateway"
		if cfg.Gateway == nil || i > 0 {
			key = fmt.Sprintf("gateways[%d]", i)
			if err := uniqueName(cfg, seen, "gateway", key, g.Name, i, ""); err != nil {
				errs = append(errs, err)
			} else if !laneNameRE.MatchString(g.Name) || g.Name == "default" {
				// It names the gateway's queue and its state file.
				errs = append(errs, cfgErr(cfg, key+".name", "%q: write lower-case letters, digits, '.', '_' or '-' (not \"default\"), like \"public\"", g.Name))
			}
		}
		errs = append(errs, gatewayKeyErrors(cfg, key, g)...)
	}
	return errs
}

func gatewayKeyErrors(cfg *Config, key string, g Gateway) []error {
	var errs []error
	host, port, err := net.SplitHostPort(g.Listen)
	if err != nil || port == "" {
		return append(errs, cfgErr(cfg, key+".listen", "%q is not host:port: write it like \"127.0.0.1:8080\"", g.Listen))
	}
	ip := net.ParseIP(host)
	loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
	if !loopback && g.APIKeysFile == "" && !g.AllowAnonymous {
		errs = append(errs, cfgErr(cfg, key+".listen", "%s is beyond loopback and no api_keys_file is set: give api_keys_file (sha256 hashes of the keys), or allow_anonymous = true to serve anyone who reaches it", g.Listen))
	}
	if (g.TLSCert == "") != (g.TLSKey == "") {
		errs = append(errs, cfgErr(cfg, key+".tls_cert", "tls_cert and tls_key go together: give both, or neither"))
	}
	for k, p := range map[string]string{"tls_cert": g.TLSCert, "tls_key": g.TLSKey, "api_keys_file": g.APIKeysFile} {
		if p != "" && !filepath.IsAbs(p) {
			errs = append(errs, cfgErr(cfg, key+"."+k, "%q is not absolute: write the file's path on the control host", p))
		}
	}
	if g.MaxHeld < 0 {
		errs = append(errs, cfgErr(cfg, key+".max_held", "%d is negative: write how many requests may wait through a switch, like 1024", g.MaxHeld))
	}
	if g.MaxBody < 0 {
		errs = append(errs, cfgErr(cfg, key+".max_body", "%d is negative: write the largest request body, like \"32M\"", g.MaxBody))
	}
	if g.MetricsAddress != "off" {
		if err := CheckMetricsAddress(g.MetricsAddress); err != nil {
			errs = append(errs, cfgErr(cfg, key+".metrics_address", "%v", err))
		}
	}
	for _, c := range g.Clusters {
		if cfg.Cluster(c) == nil {
			errs = append(errs, cfgErr(cfg, key+".clusters", "unknown cluster %q", c))
		}
	}
	return errs
}
