package testfleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// dockerdConfig is the node dockerd's own --config-file: the machine's
// /etc/docker/daemon.json sets data-root and a storage driver, which would
// clash with the flags (vfs works on any filesystem and in any namespace).
const dockerdConfig = `{"storage-driver": "vfs", "log-driver": "json-file"}` + "\n"

// StartDocker starts node n's dockerd (after KillNode, or a fleet made
// without Options.Docker) and waits until it answers _ping.
func (f *Fleet) StartDocker(ctx context.Context, n *Node) error {
	if err := f.startDocker(n); err != nil {
		return err
	}
	return f.waitDocker(ctx, n)
}

func (f *Fleet) startDocker(n *Node) error {
	dd := filepath.Join(n.Dir, "docker")
	cfg := filepath.Join(dd, "daemon.json")
	if err := os.WriteFile(cfg, []byte(dockerdConfig), 0o644); err != nil {
		return fmt.Errorf("testfleet %s node %s: %w", f.st.Name, n.Name, err)
	}
	sock, err := f.HostPath(n, NodeDockerSocket)
	if err != nil {
		return err
	}
	n.DockerSocket = sock
	n.CgroupParent = fmt.Sprintf("sparklane-testfleet-%s-%s", f.st.Name, n.Name)
	_ = os.Remove(filepath.Join(dd, "dockerd.pid"))
	// A fresh start is a boot: /run is empty on a real host. A stale
	// exec-root (containerd.pid of a killed containerd whose pid may be
	// reused) makes dockerd wait for a containerd that is not there.
	execRoot, err := f.HostPath(n, "/run/sparklane/dx")
	if err != nil {
		return err
	}
	if err := os.RemoveAll(execRoot); err != nil {
		return fmt.Errorf("testfleet %s node %s: clear exec-root: %w", f.st.Name, n.Name, err)
	}
	// nsenter --net/--mount into the holder, not `ip netns exec`: that
	// remounts /sys and hides the cgroup mounts dockerd needs.
	cmd, err := f.startBG(filepath.Join(dd, "dockerd.log"),
		"nsenter", "--target", strconv.Itoa(n.HolderPID), "--net", "--mount", "--uts", "--",
		"dockerd", "--config-file", cfg,
		"--data-root", filepath.Join(dd, "data"),
		"--exec-root", "/run/sparklane/dx",
		"--pidfile", filepath.Join(dd, "dockerd.pid"),
		"-H", "unix://"+NodeDockerSocket,
		"--bridge=none", "--iptables=false", "--ip6tables=false",
		"--cgroup-parent", "/"+n.CgroupParent,
	)
	if err != nil {
		return fmt.Errorf("testfleet %s node %s: dockerd: %w", f.st.Name, n.Name, err)
	}
	n.DockerPID = cmd.Process.Pid // nsenter execs dockerd: same pid
	return f.save()
}

// DockerHTTP is an HTTP client that talks to node n's dockerd through its
// socket on the control host (URLs like http://docker/_ping).
func DockerHTTP(n *Node) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", n.DockerSocket)
		},
	}}
}

func (f *Fleet) waitDocker(ctx context.Context, n *Node) error {
	c := DockerHTTP(n)
	err := poll(ctx, 90*time.Second, fmt.Sprintf("testfleet %s node %s: dockerd on %s", f.st.Name, n.Name, n.DockerSocket), func() (bool, error) {
		if n.DockerPID != 0 && !processAlive(n.DockerPID) {
			return false, fmt.Errorf("dockerd (pid %d) exited", n.DockerPID)
		}
		resp, err := c.Get("http://docker/_ping")
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && string(b) == "OK", fmt.Errorf("_ping: %s %s", resp.Status, b)
	})
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(n.Dir, "docker", "dockerd.log"))
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if !strings.Contains(l, "module=grpc") {
				lines = append(lines, l)
			}
		}
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		return fmt.Errorf("%w; dockerd log tail:\n%s", err, strings.Join(lines, "\n"))
	}
	return nil
}

// removeContainers force-removes every container of node n's dockerd when
// it answers (best effort: KillNode and the cgroup sweep catch the rest).
func removeContainers(n *Node) error {
	if n.DockerSocket == "" || n.DockerPID == 0 || !processAlive(n.DockerPID) {
		return nil
	}
	c := DockerHTTP(n)
	resp, err := c.Get("http://docker/containers/json?all=1")
	if err != nil {
		return nil // not answering: the kill sweep handles it
	}
	defer resp.Body.Close()
	var list []struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return fmt.Errorf("node %s: list containers: %w", n.Name, err)
	}
	for _, ct := range list {
		req, _ := http.NewRequest(http.MethodDelete, "http://docker/containers/"+ct.ID+"?force=1&v=1", nil)
		r, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("node %s: remove container %s: %w", n.Name, ct.ID, err)
		}
		r.Body.Close()
	}
	return nil
}

// StopDocker kills node n's dockerd (its containers keep running, as after
// a dockerd crash with live-restore off they would be stopped on restart).
func (f *Fleet) StopDocker(n *Node) error {
	if n.DockerPID == 0 {
		return nil
	}
	if err := syscall.Kill(n.DockerPID, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("testfleet %s node %s: kill dockerd: %w", f.st.Name, n.Name, err)
	}
	n.DockerPID = 0
	return f.save()
}
