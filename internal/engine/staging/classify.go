package staging

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/sparklane/sparklane/internal/fault"
)

// Permanent fault types of a destination that retrying cannot fix: the
// operator must act on the node first. Activities turn them into
// non-retryable errors instead of retrying a read-only disk for minutes.
const (
	// ReadOnly: the destination's filesystem is mounted read-only (EROFS).
	ReadOnly = "ReadOnlyDestination"
	// PermissionDenied: the worker may not write there (EACCES, EPERM,
	// e.g. an immutable attribute).
	PermissionDenied = "PermissionDenied"
	// NotADirectory: a file sits where a directory of the path is needed.
	NotADirectory = "NotADirectory"
)

// ClassifyWrite turns a failed write at path into a permanent fault when
// retrying cannot help (disk full, read-only filesystem, permission denied,
// a file in the way), naming the path and what to do; anything else (and
// errors already classified) is returned as it is.
func ClassifyWrite(path string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := fault.TypeOf(err); ok {
		return err
	}
	switch {
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		return fault.Permanent(fault.NoSpace, fmt.Errorf("%s: disk full: %w: free space on the node and rerun (finished files and the copy in progress are kept: the rerun copies only the rest)", path, err))
	case errors.Is(err, syscall.EROFS):
		return fault.Permanent(ReadOnly, fmt.Errorf("%s: the filesystem is read-only: %w: remount it read-write or point dst at a writable disk", path, err))
	case errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM):
		return fault.Permanent(PermissionDenied, fmt.Errorf("%s: permission denied: %w: give the node worker's user write access there (owner, mode, immutable attribute: lsattr) or change dst", path, err))
	case errors.Is(err, syscall.ENOTDIR):
		return fault.Permanent(NotADirectory, fmt.Errorf("%s: a component of the path is a file where a directory is needed: %w: move that file away or change dst", path, err))
	}
	return err
}
