package testfleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Close removes everything the fleet created: containers, processes on
// every node (sshd, dockerd, containerd, containers), holders, network
// namespaces, veths, the bridge, its iptables rule, the node directories
// and the mount points it created. It is idempotent.
func (f *Fleet) Close() error {
	if f == nil {
		return nil
	}
	return teardown(&f.st, f.logf)
}

// Down removes the fleet NAME under base as recorded in its state file
// (left by a killed run or by `scripts/testfleet up`), then sweeps for
// anything of that name the state file missed.
func Down(base, name string, logf func(string, ...any)) error {
	if base == "" {
		base = DefaultBase
	}
	dir := filepath.Join(base, name)
	st, err := readState(dir)
	if errors.Is(err, os.ErrNotExist) {
		st = &state{Name: name, Dir: dir, Bridge: "slb-" + name}
	} else if err != nil {
		return err
	}
	// Sweep by name too: nodes created after the last state write.
	for i := 1; i <= maxNodes; i++ {
		known := false
		for _, n := range st.Nodes {
			known = known || n.Index == i
		}
		ns := fmt.Sprintf("sl-%s-h%d", name, i)
		if _, err := os.Stat("/run/netns/" + ns); !known && err == nil {
			st.Nodes = append(st.Nodes, &Node{Index: i, Name: fmt.Sprintf("h%d", i), NetNS: ns, Veth: fmt.Sprintf("slv-%s-%d", name, i)})
		}
	}
	return teardown(st, logf)
}

// List names the fleets recorded under base.
func List(base string) ([]string, error) {
	if base == "" {
		base = DefaultBase
	}
	ents, err := os.ReadDir(base)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var names []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(base, e.Name(), "state.json")); err == nil {
			names = append(names, e.Name())
		}
	}
	return names, err
}

func teardown(st *state, logf func(string, ...any)) error {
	ctx := context.Background()
	var errs []error
	for _, n := range st.Nodes {
		if err := removeContainers(n); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range st.Nodes {
		if err := killAll(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
		}
		if n.HolderPID != 0 && isHolder(n) {
			_ = syscall.Kill(n.HolderPID, syscall.SIGKILL)
			pid := n.HolderPID
			if err := poll(ctx, 10*time.Second, "holder exit", func() (bool, error) {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				// Gone, or a zombie waiting for its parent to reap it.
				return err != nil || strings.Contains(string(b), ") Z "), nil
			}); err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
			}
		}
		n.HolderPID, n.SSHDPID, n.DockerPID = 0, 0, 0
		for _, d := range cgroupDirs(n) {
			if err := removeCgroup(d); err != nil {
				errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
			}
		}
		if _, err := net.InterfaceByName(n.Veth); err == nil && n.Veth != "" {
			if err := run(ctx, "ip", "link", "del", n.Veth); err != nil {
				if _, gone := net.InterfaceByName(n.Veth); gone == nil {
					errs = append(errs, err)
				}
			}
		}
		if _, err := os.Stat("/run/netns/" + n.NetNS); err == nil && n.NetNS != "" {
			if err := run(ctx, "ip", "netns", "del", n.NetNS); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if st.Iptables || st.Bridge != "" {
		// -C first: delete only a rule that exists (a sweep may not know).
		if exec.Command("iptables", append([]string{"-C"}, iptablesRule(st.Bridge)...)...).Run() == nil {
			if err := run(ctx, append([]string{"iptables", "-D"}, iptablesRule(st.Bridge)...)...); err != nil {
				errs = append(errs, err)
			}
		}
		st.Iptables = false
	}
	if _, err := net.InterfaceByName(st.Bridge); err == nil {
		if err := run(ctx, "ip", "link", "del", st.Bridge); err != nil {
			errs = append(errs, err)
		}
	}
	// Mount points created on the host: removed when empty and no other
	// fleet still uses them (os.Remove fails on a non-empty directory).
	if st.Dir != "" && !otherFleetUp(st) {
		list := filepath.Join(filepath.Dir(st.Dir), "mountpoints")
		b, _ := os.ReadFile(list)
		for _, p := range append(strings.Fields(string(b)), st.Mountdirs...) {
			_ = os.Remove(p)
		}
		_ = os.Remove(list)
	}
	if len(errs) > 0 {
		return fmt.Errorf("testfleet %s down: %w (state kept in %s)", st.Name, errors.Join(errs...), st.Dir)
	}
	if st.Dir != "" {
		if err := os.RemoveAll(st.Dir); err != nil {
			return fmt.Errorf("testfleet %s down: remove %s: %w", st.Name, st.Dir, err)
		}
	}
	if logf != nil {
		logf("testfleet %s: down", st.Name)
	}
	return nil
}

// isHolder guards against killing a recycled pid: a holder runs sleep.
func isHolder(n *Node) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", n.HolderPID))
	return err == nil && strings.HasPrefix(string(b), "sleep\x00infinity")
}

// otherFleetUp: another fleet may still mount on a shared mount point.
func otherFleetUp(st *state) bool {
	base := filepath.Dir(st.Dir)
	names, _ := List(base)
	for _, name := range names {
		if name != st.Name {
			return true
		}
	}
	return false
}

// removeCgroup removes a cgroup directory tree, deepest first.
func removeCgroup(root string) error {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("rmdir cgroup %s: %w", d, err)
		}
	}
	return nil
}

// Open attaches to the fleet NAME under base from its state file (made by
// `scripts/testfleet up`), for status, Exec, SSH and Close.
func Open(base, name string) (*Fleet, error) {
	if base == "" {
		base = DefaultBase
	}
	st, err := readState(filepath.Join(base, name))
	if err != nil {
		return nil, fmt.Errorf("testfleet %s: no fleet of that name under %s: %w", name, base, err)
	}
	return &Fleet{st: *st}, nil
}

// Docker reports whether the fleet's nodes run a dockerd.
func (f *Fleet) Docker() bool { return f.st.Docker }
