package buildinfo

import "runtime/debug"

// Version is the release version: set with -ldflags
// "-X github.com/sparklane/sparklane/internal/buildinfo.Version=V" by
// scripts/release (which reads the default here).
var Version = "0.1.0"

// Commit is the source revision of this build: set with -ldflags
// "-X github.com/sparklane/sparklane/internal/buildinfo.Commit=REV" by a
// release build, else read from the Go toolchain's VCS stamp.
var Commit = ""

// BuildCommit is Commit, the VCS revision the binary was built from, or
// "unknown" (a test binary, or a build outside a git checkout).
func BuildCommit() string {
	if Commit != "" {
		return Commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	return "unknown"
}
