// Package fittest writes model snapshots for memory-fit tests: a Hub
// cache layout (models--org--name/refs/main, snapshots/REV/) whose
// safetensors shards declare as many parameters as asked while holding
// only their headers — the data section is a hole (a sparse file), so a
// 200 GB model costs a few kilobytes of disk.
//
// A test kit: production code never imports it.
package fittest
