// Package fakeclock is a clock whose sleeps move it on at once, for the
// tests of code that waits (staging.Pacer's rate and memory floor): what
// the code makes a caller wait is read off this clock, never off the
// machine's speed.
//
// Test kit: production code must not import it; it imports nothing of
// sparklane.
package fakeclock
