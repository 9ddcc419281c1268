// Package diskuse measures what staging really wrote, for the tests that
// bound how much a resumed copy writes again.
//
// Test kit: production code must not import it.
package diskuse
