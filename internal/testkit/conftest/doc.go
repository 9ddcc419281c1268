// Package conftest is what the tests of the operator-written files
// share: the config files they write, writing them, and reading back the
// errors they produce (internal/config and internal/lane tests).
//
// Test kit: production code must not import it, and it imports nothing
// of sparklane (internal/config's own tests use it).
package conftest
