// Command testfleet is scripts/testfleet: it brings a test fleet of
// network-namespace hosts up, shows it, and removes it (also one left by a
// killed test run), so a person can try multi-host behaviour by hand.
//
// A test-kit main for running the fleet by hand (scripts/testfleet).
package main
