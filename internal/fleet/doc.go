// Package fleet installs, upgrades, inspects and removes the node service
// (`worker node --node NAME`) on a fleet's nodes over SSH: the exact worker
// binary (uploaded only when its sha256 differs), the node's config, and a
// systemd unit — or, on a host without systemd, a small POSIX sh
// supervisor. Every step is idempotent and reports what it changed. It
// knows nothing of Temporal or cobra: the CLI supplies the binary, the
// config bytes and (for waiting on a poller) a PollerSource.
//
// It must not import go.temporal.io, activities or workflows: installing node
// services is SSH only.
package fleet
