// Package tunnel is how node workers on other hosts reach the control
// plane by default, with nothing listening unauthenticated beyond loopback.
//
// The embedded Temporal server has no authentication, so it listens on the
// control host's 127.0.0.1 only. The control service keeps one SSH
// connection per remote node (golang.org/x/crypto/ssh, host key checked
// against known_hosts like every other dial) and asks each node's sshd to
// listen on the node's own 127.0.0.1:PORT and forward what arrives there
// back through that connection to the control host's frontend (ssh -R).
// Node workers dial 127.0.0.1:PORT on their own host. Only processes on the
// node can use it — the same trust as the node's root — and the control
// host authenticates every node by its host key.
//
// We chose this over mTLS as the default because it needs nothing but what
// operators already have (SSH keys and known_hosts for every node), no CA
// to create, distribute and rotate, and no port opened on the control host.
// mTLS stays available for an external cluster (temporal.tls_*).
//
// A Keeper reconnects with capped exponential backoff, forever, until its
// context ends; its state is reported for `starter fleet status`.
//
// It must not import go.temporal.io, activities or workflows: a tunnel is SSH
// only.
package tunnel
