// Package syncbuf is a bytes.Buffer that can be read while other
// goroutines write to it: an SSH session's output read when its context
// ends (internal/node), a log or a process's output a test reads while
// the code under test writes it.
//
// It imports nothing of the project.
package syncbuf
