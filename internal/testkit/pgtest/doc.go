// Package pgtest starts the real parts of an external Temporal cluster for
// tests: a PostgreSQL server (Debian's postgresql package, initdb into a
// temporary directory, run as the postgres user, which the server requires
// when the test runs as root) and a Temporal server from the
// go.temporal.io/server module on it — the postgres12 SQL plugin, both
// schemas applied from the module's embedded schema files, the way
// temporal-sql-tool does in docker-compose.temporal.yml — with its frontend
// behind mutual TLS when it listens beyond loopback. A postmaster outlives
// a test process killed before its cleanup; the next Start stops it and
// removes its directory (each names its owner's pid).
//
//	pg := pgtest.Start(t, pgtest.Options{})
//	srv := pgtest.StartTemporal(t, pg, pgtest.TemporalOptions{IP: bridgeIP, TLS: &tls})
//	// srv.Address: what temporal.address points at
//
// Test kit: production code must not import it.
package pgtest
