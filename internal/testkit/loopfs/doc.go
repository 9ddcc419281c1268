// Package loopfs mounts a small real ext4 filesystem for tests that must
// see free space change (disk pruning, min_free): a file in t.TempDir()
// made a loop device with losetup, formatted with mkfs.ext4 and mounted.
// Everything is undone in t.Cleanup, also when the test fails. It needs
// root and the losetup/mkfs.ext4/mount tools; without them the test fails
// (never skips), naming what is missing.
//
// Test kit: production code must not import it.
package loopfs
