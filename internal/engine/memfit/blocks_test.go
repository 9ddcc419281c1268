package memfit

import (
	"os"
	"syscall"
)

// sysBlocks is the disk a file takes (512-byte blocks).
func sysBlocks(fi os.FileInfo) (int64, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return st.Blocks * 512, true
}
