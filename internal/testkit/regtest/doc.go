// Package regtest runs a real container registry for tests — Debian's
// docker-registry (CNCF distribution 2.8) on a loopback address, over
// plain HTTP or TLS (a self-signed certificate), with or without htpasswd
// auth — and pushes images made from bytes into it with
// go-containerregistry, so registry pulls are tested against the real
// server, not a double. No traffic leaves 127.0.0.0/8.
//
// Test kit: production code must not import it.
package regtest
