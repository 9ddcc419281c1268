package images

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/fault"
)

// RegistryRef is where ref's image is pulled from reg: REG/REPO:TAG, or
// REG/REPO@DIGEST for a pin without a tag, REPO being the image's
// repository without the host it names (with reg its own registry, the
// reference itself).
func RegistryRef(reg string, ref contract.ImageRef) string {
	repo := ref.Repo
	// Docker Hub names (library/x, x) and foreign hosts keep only their path.
	if ref.NamesRegistry() {
		_, repo, _ = strings.Cut(repo, "/")
	}
	name := reg + "/" + repo
	if ref.Name == "" {
		return name + "@" + ref.Digest
	}
	return name + strings.TrimPrefix(ref.Name, ref.Repo)
}

// registryHost is reg's host[:port] (reg without its path prefix).
func registryHost(reg string) string {
	h, _, _ := strings.Cut(reg, "/")
	return h
}

// loopbackHost reports whether host[:port] is the node itself by name or
// address (localhost, 127.0.0.1, ::1), where a registry may answer plain
// HTTP without being listed: nothing crosses a network.
func loopbackHost(host string) bool {
	h := host
	if sh, _, err := net.SplitHostPort(host); err == nil {
		h = sh
	}
	h = strings.Trim(h, "[]")
	return h == "localhost" || h == "127.0.0.1" || h == "::1"
}

// errPlainHTTP is a request over plain HTTP to a registry not allowed
// it (not listed in image_insecure_registries, not loopback).
var errPlainHTTP = errors.New("plain HTTP to a registry not in image_insecure_registries")

// transportFor is the HTTP transport of a pull from host: base (nil: a
// clone of http.DefaultTransport) that refuses plain HTTP unless to host
// when it is insecure or loopback — go-containerregistry itself would fall
// back to HTTP for any private address — and, when insecure, does not
// verify host's certificate (Docker's insecure-registries does the same);
// any other host a registry redirects to (blob storage) is verified.
func transportFor(base http.RoundTripper, host string, insecure bool) http.RoundTripper {
	p := plainPolicy{host: host, plain: insecure || loopbackHost(host), verified: base, unverified: base}
	if base == nil {
		p.verified = http.DefaultTransport.(*http.Transport).Clone()
		p.unverified = p.verified
		if insecure {
			t := http.DefaultTransport.(*http.Transport).Clone()
			t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the operator listed the registry as insecure
			p.unverified = t
		}
	}
	return p
}

// plainPolicy is a pull's transport: plain HTTP only to host and only when
// plain; host's TLS through unverified (the same as verified unless the
// registry is insecure), any other host's through verified.
type plainPolicy struct {
	host                 string
	plain                bool
	verified, unverified http.RoundTripper
}

// RoundTrip sends r, or refuses it when it would go over plain HTTP.
func (p plainPolicy) RoundTrip(r *http.Request) (*http.Response, error) {
	own := strings.EqualFold(r.URL.Host, p.host)
	if r.URL.Scheme == "http" && !(p.plain && own) {
		return nil, errPlainHTTP
	}
	if own {
		return p.unverified.RoundTrip(r)
	}
	return p.verified.RoundTrip(r)
}

// isPlainHTTP reports whether err says the registry answers plain HTTP
// only: an HTTPS request answered in HTTP, or the policy's refusal.
func isPlainHTTP(err error) bool {
	var rh tls.RecordHeaderError
	return errors.Is(err, errPlainHTTP) || errors.As(err, &rh) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

// isUntrustedTLS reports whether err is a certificate the node does not
// trust (unknown authority, wrong name, expired).
func isUntrustedTLS(err error) bool {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var cv *tls.CertificateVerificationError
	return errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) || errors.As(err, &cv) || strings.Contains(err.Error(), "x509: ")
}

// pullErr classifies a failed pull of from (errors name the node, the
// registry and what to do): a registry that does not know the image,
// refuses the credentials, answers plain HTTP or shows an untrusted
// certificate fails the same way again (permanent); the network, a
// registry's 5xx or its rate limit may pass.
func (s PullSpec) pullErr(ctx context.Context, from string, err error) error {
	host := registryHost(s.Registry)
	cfg := s.ConfigFile
	if cfg == "" {
		cfg = "the fleet config (sparklane.toml)"
	}
	var te *transport.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("node %s: pull %s: %w", s.Node, from, ctx.Err())
	case isPlainHTTP(err):
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: registry %s answers plain HTTP: add it to image_insecure_registries in %s (sparklane's registry client then pulls over HTTP; no node's Docker needs configuring)", s.Node, host, cfg))
	case isUntrustedTLS(err):
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: registry %s shows a certificate this node does not trust (%v): add the registry's CA to the node's trust store, or add %s to image_insecure_registries in %s to skip the check", s.Node, host, err, host, cfg))
	case errors.As(err, &te):
		return s.statusErr(from, host, te)
	}
	return fmt.Errorf("node %s: registry %s unreachable from this node (pull %s): %w", s.Node, host, from, err)
}

// statusErr classifies a registry's answer te to a pull of from.
func (s PullSpec) statusErr(from, host string, te *transport.Error) error {
	code := func(codes ...transport.ErrorCode) bool {
		for _, d := range te.Errors {
			for _, c := range codes {
				if d.Code == c {
					return true
				}
			}
		}
		return false
	}
	switch {
	case te.StatusCode == http.StatusNotFound || code(transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode):
		return fault.Permanent(fault.ImageMissing, fmt.Errorf("node %s: registry %s has no %s (%v): push it there (docker push %s), or add a [build] to the recipe", s.Node, host, from, te, from))
	case te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden || code(transport.UnauthorizedErrorCode, transport.DeniedErrorCode):
		switch {
		case s.Auth != nil:
			return fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: registry %s refused the credentials for %s from image_registry_auth_file %s on the control host (%v): log in again into that file (DOCKER_CONFIG=DIR docker login %s)", s.Node, host, from, s.AuthFile, te, host))
		case s.AuthFile != "":
			return fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: registry %s refused pulling %s without credentials (%v), and image_registry_auth_file %s on the control host has none for %s: log in into that file (DOCKER_CONFIG=DIR docker login %s), or check the image's name", s.Node, host, from, te, s.AuthFile, host, host))
		}
		return fault.Permanent(fault.InvalidSpec, fmt.Errorf("node %s: registry %s refused pulling %s without credentials (%v): the image is private or does not exist there; set image_registry_auth_file in %s to a Docker config.json on the control host that has a login for %s", s.Node, host, from, te, s.settings(), host))
	case te.StatusCode == http.StatusTooManyRequests || code(transport.TooManyRequestsErrorCode):
		return fmt.Errorf("node %s: registry %s limits pulls (%v): wait, or pull with a login (image_registry_auth_file)", s.Node, host, te)
	}
	return fmt.Errorf("node %s: registry %s: pull %s: %w", s.Node, host, from, te)
}

// settings is the file where the registry keys go, for errors.
func (s PullSpec) settings() string {
	if s.ConfigFile == "" {
		return "the fleet config (sparklane.toml) or the recipe"
	}
	return s.ConfigFile + " or the recipe"
}
