// Package pki makes the small certificate authority an mTLS deployment of
// the external Temporal cluster needs (docker-compose.temporal.mtls.yml):
// a CA, a server certificate for the frontend's names and addresses, and
// client certificates for sparklane's workers, the starter and the UI.
// Keys are ECDSA P-256; files are written 0600 (keys) under a directory the
// operator chooses (by default STATE_DIR/pki). Existing files are kept, so
// issuing a new client never replaces the CA the server already trusts.
//
// It must not import go.temporal.io or any other sparklane package: callers
// hand it paths and names.
package pki
