package hubmirror

import (
	"errors"
	"io/fs"

	"golang.org/x/sys/unix"
)

// missing reports an error that only says the path is not there (yet).
func missing(err error) bool { return errors.Is(err, fs.ErrNotExist) }

func isReg(st unix.Stat_t) bool  { return st.Mode&unix.S_IFMT == unix.S_IFREG }
func isLink(st unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFLNK }
func isDir(st unix.Stat_t) bool  { return st.Mode&unix.S_IFMT == unix.S_IFDIR }
