package discover

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/sparklane/sparklane/internal/node"
)

// Options shape one probe.
type Options struct {
	// SysRoot prefixes /sys when reading /sys/class/infiniband: "" on a
	// real node; tests point it at a fake /sys tree (a test double).
	SysRoot string
	// Docker is the docker command looked up on the node (default
	// "docker"); tests name a missing one to see Docker absent.
	Docker string
}

// Disk is one mounted filesystem.
type Disk struct {
	Device string
	Mount  string
	Size   int64
	Free   int64
}

// RDMA is one device under /sys/class/infiniband with its netdevs.
type RDMA struct {
	Device  string
	Netdevs []string
}

// Facts are what a node offers.
type Facts struct {
	Disks []Disk
	// Docker is true when the docker command exists; NvidiaRuntime when
	// `docker info` lists the nvidia runtime.
	Docker        bool
	NvidiaRuntime bool
	// DockerHost is DOCKER_HOST in the node's login environment (a
	// rootless or relocated daemon's socket): init writes it as the
	// node's docker endpoint, so sparklane talks to the daemon the
	// node's own docker command does. "" when unset.
	DockerHost string
	// GPUs are nvidia-smi's "name, memory" lines.
	GPUs []string
	RDMA []RDMA
	// Addrs maps a netdev to its IPv4 addresses (CIDR form).
	Addrs map[string][]string
	// Memory is MemTotal in bytes (on a DGX Spark, the unified memory
	// the GPU shares), for the memory fit; 0 unread.
	Memory int64
	// Mounts are the node's mounts (/proc/self/mountinfo), from which
	// SharedMounts finds the NAS: one filesystem at one path everywhere.
	Mounts []Mount
	// UUIDs maps a block device's major:minor to its filesystem UUID
	// (/dev/disk/by-uuid), so two nodes' local disks that share a
	// device name are not taken for one filesystem.
	UUIDs map[string]string
}

// script prints one section per fact; every command may be missing.
func script(o Options) string {
	docker := o.Docker
	if docker == "" {
		docker = "docker"
	}
	return fmt.Sprintf(`R=%s; D=%s
echo @@df; df -PB1 -a -x tmpfs -x devtmpfs -x overlay -x squashfs 2>/dev/null | tail -n +2
echo @@dockerhost; printf '%%s\n' "${DOCKER_HOST:-}"
echo @@docker; if command -v "$D" >/dev/null 2>&1; then echo present; "$D" info --format '{{json .Runtimes}}' 2>/dev/null; else echo absent; fi
echo @@gpu; if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null; fi
echo @@ib; for d in "$R"/sys/class/infiniband/*; do [ -e "$d" ] || continue; echo "$(basename "$d") $(ls "$d/device/net" 2>/dev/null | tr '\n' ' ')"; done
echo @@ip; ip -4 -o addr show 2>/dev/null | awk '{print $2, $4}'
echo @@mem; grep '^MemTotal:' "$R"/proc/meminfo 2>/dev/null
echo @@mounts; cat /proc/self/mountinfo 2>/dev/null
echo @@uuid; for l in /dev/disk/by-uuid/*; do [ -e "$l" ] || continue; echo "${l##*/} $(stat -L -c '%%t %%T' "$l" 2>/dev/null)"; done
echo @@end
`, shellQuote(o.SysRoot), shellQuote(docker))
}

// Probe runs the discovery script on a connected node.
func Probe(ctx context.Context, c *ssh.Client, o Options) (Facts, error) {
	out, errOut, code, err := node.Run(ctx, c, script(o))
	if err != nil {
		return Facts{}, err
	}
	if code != 0 || !strings.Contains(out, "@@end") {
		return Facts{}, fmt.Errorf("discovery script exited %d: %s", code, strings.TrimSpace(errOut))
	}
	return Parse(out), nil
}

// Parse reads the script's output.
func Parse(out string) Facts {
	f := Facts{Addrs: map[string][]string{}, UUIDs: map[string]string{}}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "@@") {
			section = line[2:]
			continue
		}
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		switch section {
		case "df":
			if len(fields) < 6 {
				continue
			}
			// A loop device is a file on another disk (a snap, a
			// mounted image, a test's scratch filesystem): never a
			// staging disk, and not worth listing; it comes and goes.
			if strings.HasPrefix(fields[0], "/dev/loop") {
				continue
			}
			// df -a lists every mount, bind mounts too (a disk bound
			// at /mnt/nvme shows there), and pseudo filesystems with
			// no size, which are no disks; a path mounted over is
			// the last one listed.
			size, _ := strconv.ParseInt(fields[1], 10, 64)
			free, _ := strconv.ParseInt(fields[3], 10, 64)
			d := Disk{Device: fields[0], Mount: strings.Join(fields[5:], " "), Size: size, Free: free}
			if size <= 0 {
				continue
			}
			f.Disks = slices.DeleteFunc(f.Disks, func(o Disk) bool { return o.Mount == d.Mount })
			f.Disks = append(f.Disks, d)
		case "docker":
			if line == "present" {
				f.Docker = true
			} else if strings.Contains(line, `"nvidia"`) {
				f.NvidiaRuntime = true
			}
		case "gpu":
			f.GPUs = append(f.GPUs, line)
		case "ib":
			f.RDMA = append(f.RDMA, RDMA{Device: fields[0], Netdevs: fields[1:]})
		case "dockerhost":
			f.DockerHost = line
		case "mem":
			if len(fields) == 3 && fields[2] == "kB" {
				kb, _ := strconv.ParseInt(fields[1], 10, 64)
				f.Memory = kb * 1024
			}
		case "ip":
			if len(fields) == 2 {
				f.Addrs[fields[0]] = append(f.Addrs[fields[0]], fields[1])
			}
		case "mounts":
			if m, ok := parseMountinfo(line); ok {
				f.Mounts = append(f.Mounts, m)
			}
		case "uuid":
			// "UUID major minor", the numbers in hex (stat's %t %T).
			if len(fields) == 3 {
				maj, err1 := strconv.ParseUint(fields[1], 16, 32)
				minor, err2 := strconv.ParseUint(fields[2], 16, 32)
				if err1 == nil && err2 == nil {
					f.UUIDs[fmt.Sprintf("%d:%d", maj, minor)] = fields[0]
				}
			}
		}
	}
	return f
}

// skipMount are system mounts never proposed as staging roots.
func skipMount(m string) bool {
	for _, p := range []string{"/boot", "/snap", "/run", "/dev", "/sys", "/proc", "/var/lib/docker", "/etc", "/usr"} {
		if m == p || strings.HasPrefix(m, p+"/") {
			return true
		}
	}
	return false
}

// Root proposes the staging root: on the NVMe disk with the most free
// space when there is one, else the disk with the most free space —
// never a read-only or network filesystem (the NAS is read, not staged
// to). An NVMe mounted at / (a DGX Spark's one disk) gets
// /mnt/nvme/sparklane, a directory on it where the shipped recipes stage.
func (f Facts) Root() (string, Disk, bool) {
	notLocal := map[string]bool{}
	for _, m := range f.Mounts {
		notLocal[m.Path] = m.ReadOnly || networked(m) // the last mount at a path is the one seen
	}
	var best Disk
	found, bestNVMe := false, false
	for _, d := range f.Disks {
		if skipMount(d.Mount) || notLocal[d.Mount] {
			continue
		}
		nvme := strings.Contains(d.Device, "nvme") || strings.Contains(d.Mount, "nvme")
		if !found || (nvme && !bestNVMe) || (nvme == bestNVMe && d.Free > best.Free) {
			best, bestNVMe, found = d, nvme, true
		}
	}
	if !found {
		return "", Disk{}, false
	}
	if best.Mount == "/" && bestNVMe {
		// The NVMe is the system disk (a DGX Spark): a directory on it,
		// at the path the shipped recipes stage under.
		return "/mnt/nvme/sparklane", best, true
	}
	if best.Mount == "/" {
		return "/srv/sparklane", best, true
	}
	return path.Join(best.Mount, "sparklane"), best, true
}

// FastAddress is the IPv4 address of the first RDMA netdev that has one:
// the fast network a lane's ranks talk over.
func (f Facts) FastAddress() (addr, netdev string) {
	for _, r := range f.RDMA {
		for _, n := range r.Netdevs {
			if a := f.Addrs[n]; len(a) > 0 {
				ip, _, _ := strings.Cut(a[0], "/")
				return ip, n
			}
		}
	}
	return "", ""
}

// HCAs and Netdevs are the RDMA devices and their netdevs, sorted.
func (f Facts) HCAs() (hcas, netdevs []string) {
	for _, r := range f.RDMA {
		hcas = append(hcas, r.Device)
		netdevs = append(netdevs, r.Netdevs...)
	}
	sort.Strings(hcas)
	sort.Strings(netdevs)
	return hcas, netdevs
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// errGotKey stops the handshake once the host key is in hand.
var errGotKey = errors.New("host key fetched")

// HostKey fetches the key t's server offers, without trusting it, so
// `starter init` can show its fingerprint for the operator to confirm.
func HostKey(ctx context.Context, t node.SSHTarget, timeout time.Duration) (ssh.PublicKey, error) {
	var key ssh.PublicKey
	cfg := &ssh.ClientConfig{
		User: t.User,
		HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error {
			key = k
			return errGotKey
		},
		Timeout: timeout,
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", t.Addr())
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w", t.Addr(), err)
	}
	defer conn.Close()
	_, _, _, err = ssh.NewClientConn(conn, t.Addr(), cfg)
	if key == nil {
		return nil, fmt.Errorf("ssh %s: no host key offered: %w", t.Addr(), err)
	}
	return key, nil
}

// TrustHostKey appends key for t to the known_hosts file (created 0600
// when missing), after the operator confirmed its fingerprint.
func TrustHostKey(file string, t node.SSHTarget, key ssh.PublicKey) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(t.Addr())}, key)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
