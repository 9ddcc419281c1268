//go:build !unix

package power

// setBroadcast is a no-op where the socket option is spelled differently;
// sparklane nodes run Linux.
func setBroadcast(fd uintptr) error { return nil }
