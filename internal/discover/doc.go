// Package discover finds out what a GPU node offers — disks and free
// space, Docker and its NVIDIA runtime, GPUs, RDMA devices and their
// netdevs — over one SSH session, and writes a commented fleet config from
// it (`starter init`), so an operator does not type addresses and device
// names by hand.
//
// It must not import go.temporal.io, activities or workflows: discovery is
// SSH and files only.
package discover
