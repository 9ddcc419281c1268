// Package tclient dials the Temporal client every sparklane process uses
// (workers, starter), with TLS / API-key options for an external cluster
// and a bounded connect time: an unreachable server is one clear line that
// says where it tried and how to start the embedded one, never a hang.
//
// It imports the Temporal SDK's client only; never the server, activities or
// workflows.
package tclient
