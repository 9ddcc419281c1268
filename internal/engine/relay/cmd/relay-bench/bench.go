package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sparklane/sparklane/internal/engine/relay"
	"github.com/sparklane/sparklane/internal/hubcache"
	"github.com/sparklane/sparklane/internal/pki"
	"github.com/sparklane/sparklane/internal/testkit/testfleet"
)

// The node-side paths (the NAS mount and the staging root are node-local
// directories of the test fleet).
const (
	nasMount = "/run/sparklane/nas"
	root     = "/mnt/nvme"
	dst      = "/mnt/nvme/lane"
)

type bench struct {
	f     *testfleet.Fleet
	nodes []*testfleet.Node // the staging nodes
	nas   *testfleet.Node   // the NAS host
	self  string
	pki   string
	lane  int64 // bytes of relayed files in the lane
}

func benchMain(args []string) error {
	fs := flag.NewFlagSet("relay-bench", flag.ContinueOnError)
	n := fs.Int("nodes", 4, "staging nodes")
	sizeMiB := fs.Int64("size-mib", 512, "lane size in MiB (4 shards)")
	rate := fs.Int("nas-mbit", 160, "NAS link rate in Mbit/s (tc tbf on the NAS host)")
	name := fs.String("name", "rbench", "test fleet name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx := context.Background()
	f, err := testfleet.Up(ctx, testfleet.Options{Name: *name, Nodes: *n + 1})
	if err != nil {
		return err
	}
	b := &bench{f: f, nodes: f.Nodes()[:*n], nas: f.Node(*n + 1), self: self, pki: filepath.Join(f.Dir(), "pki")}
	defer func() {
		for _, nd := range b.nodes {
			f.Exec(nd, "fusermount", "-u", nasMount)
		}
		testfleet.Down("", *name, nil)
	}()
	fmt.Printf("test fleet %s: %d staging nodes + NAS host %s (%s), NAS link %d Mbit/s (tc tbf), lane %d MiB\n", *name, *n, b.nas.Name, b.nas.IP, *rate, *sizeMiB)
	if b.lane, err = writeHub(filepath.Join(f.NASDir(), "hub"), *sizeMiB<<20); err != nil {
		return err
	}
	ca, err := pki.LoadOrCreateCA(b.pki, "relay bench CA")
	if err != nil {
		return err
	}
	for _, nd := range b.nodes {
		if _, err := ca.Peer(pki.FleetPeerPrefix+nd.Name, []string{nd.IP}); err != nil {
			return err
		}
	}
	if out, err := f.Exec(b.nas, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", fmt.Sprintf("%dmbit", *rate), "burst", "256kb", "latency", "400ms"); err != nil {
		return fmt.Errorf("tc on the NAS host: %v: %s", err, out)
	}
	for _, nd := range b.nodes {
		if out, err := f.Exec(nd, "sh", "-ec", fmt.Sprintf("mkdir -p %s %s && sshfs -o ro,IdentityFile=%s,UserKnownHostsFile=%s,StrictHostKeyChecking=yes,BatchMode=yes root@%s:%s %s",
			nasMount, root, f.IdentityFile(), f.KnownHostsFile(), b.nas.IP, testfleet.NASPath, nasMount)); err != nil {
			return fmt.Errorf("sshfs on %s: %v: %s", nd.Name, err, out)
		}
	}

	one, err := b.pass("1 node", b.nodes[:1], false, "", 0)
	if err != nil {
		return err
	}
	plain, err := b.pass(fmt.Sprintf("%d nodes, each reading the NAS", *n), b.nodes, false, "", 0)
	if err != nil {
		return err
	}
	relayed, err := b.pass(fmt.Sprintf("%d nodes, relay", *n), b.nodes, true, "", 0)
	if err != nil {
		return err
	}
	victim := b.nodes[len(b.nodes)/2]
	resumed, err := b.pass(fmt.Sprintf("%d nodes, relay, %s killed -9 mid-relay and restarted", *n, victim.Name), b.nodes, true, victim.Name, b.lane/2)
	if err != nil {
		return err
	}

	fmt.Println()
	fmt.Printf("NAS bytes read, %d-node stage of a %s lane:\n", *n, human(b.lane))
	for _, p := range []*passOut{one, plain, relayed, resumed} {
		fmt.Printf("  %-55s engine %9s (%.2f× lane)   NAS sftp-server rchar %9s (%.2f×)   %6.1f s\n", p.label, human(p.engineNAS), ratio(p.engineNAS, b.lane), human(p.sftpRead), ratio(p.sftpRead, b.lane), p.wall)
	}
	fmt.Printf("\nwall time, NAS at %d Mbit/s: %d-node relay / 1-node = %.2f (goal ≤ 1.25); %d nodes each reading the NAS / 1-node = %.2f\n",
		*rate, *n, relayed.wall/one.wall, *n, plain.wall/one.wall)
	fmt.Printf("NAS bytes: relay %.2f× the lane (goal 1.0), without relay %.2f×\n", ratio(relayed.engineNAS, b.lane), ratio(plain.engineNAS, b.lane))
	fmt.Printf("resume: %s held at %s relayed and fsynced, killed -9, restarted: %s re-copied (%s kept from the temp files)\n",
		victim.Name, human(resumed.pausedAt), human(resumed.recopied), human(resumed.resumedKept))
	return nil
}

type passOut struct {
	label               string
	wall                float64
	engineNAS, sftpRead int64
	outs                map[string]nodeOut
	pausedAt, recopied  int64
	resumedKept         int64
}

// pass wipes the nodes' staging dirs and stages the lane on nodes at once.
// With victim set, that node holds once pauseAt relayed bytes are fsynced,
// is killed -9 and started again.
func (b *bench) pass(label string, nodes []*testfleet.Node, useRelay bool, victim string, pauseAt int64) (*passOut, error) {
	for _, nd := range b.nodes {
		if out, err := b.f.Exec(nd, "rm", "-rf", dst); err != nil {
			return nil, fmt.Errorf("wipe %s on %s: %v: %s", dst, nd.Name, err, out)
		}
	}
	var names, peers []string
	for _, nd := range nodes {
		names = append(names, nd.Name)
		peers = append(peers, nd.Name+"="+nd.IP+":7290")
	}
	argv := func(nd *testfleet.Node, pause int64) []string {
		return []string{b.self, "node", "--name", nd.Name, "--nodes", strings.Join(names, ","), "--peers", strings.Join(peers, ","),
			"--listen", nd.IP + ":7290", "--src", nasMount + "/hub", "--dst", dst, "--root", root, "--pki", b.pki,
			"--relay=" + strconv.FormatBool(useRelay), "--pause-at", strconv.FormatInt(pause, 10)}
	}
	before := b.sftpRChar()
	start := time.Now()
	p := &passOut{label: label, outs: map[string]nodeOut{}}
	type proc struct {
		cmd   *exec.Cmd
		stdin interface{ Close() error }
	}
	var mu sync.Mutex
	var procs []proc
	var wg sync.WaitGroup
	errc := make(chan error, 2*len(nodes))
	var startNode func(nd *testfleet.Node, pause int64)
	startNode = func(nd *testfleet.Node, pause int64) {
		cmd := b.f.Command(nd, argv(nd, pause)...)
		cmd.Stderr = os.Stderr
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			errc <- err
			return
		}
		mu.Lock()
		procs = append(procs, proc{cmd, in})
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := bufio.NewReader(out)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					errc <- fmt.Errorf("%s ended without a result: %v", nd.Name, err)
					return
				}
				if rest, ok := strings.CutPrefix(line, "PAUSED "); ok {
					p.pausedAt, _ = strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
					cmd.Process.Kill() // SIGKILL: nothing runs on the way out
					cmd.Wait()
					startNode(nd, 0) // the node worker is back
					return
				}
				var o nodeOut
				if json.Unmarshal([]byte(line), &o) == nil && o.Node != "" {
					mu.Lock()
					p.outs[o.Node] = o
					mu.Unlock()
					return
				}
			}
		}()
	}
	for _, nd := range nodes {
		pause := int64(0)
		if nd.Name == victim {
			pause = pauseAt
		}
		startNode(nd, pause)
	}
	wg.Wait()
	p.wall = time.Since(start).Seconds()
	for _, pr := range procs {
		pr.stdin.Close()
	}
	for _, pr := range procs {
		pr.cmd.Wait()
	}
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	p.sftpRead = b.sftpRChar() - before
	for _, o := range p.outs {
		p.engineNAS += o.Result.FromNAS
	}
	if victim != "" {
		o := p.outs[victim]
		if o.Result.Relay != nil {
			p.resumedKept = o.Result.Relay.Resumed
		}
		// The restarted node had to write at least what was not fsynced
		// before the kill; anything beyond was copied twice.
		written := o.Result.CopiedBytes
		p.recopied = max(0, written-(b.lane-p.pausedAt))
	}
	var keys []string
	for k := range p.outs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Printf("\n%s: %.1f s\n", label, p.wall)
	for _, k := range keys {
		o := p.outs[k]
		fmt.Printf("  %s: %.1f s, copied %s, from NAS %s, from peers %v\n", k, o.Seconds, human(o.Result.CopiedBytes), human(o.Result.FromNAS), humanMap(o.Result.FromPeers))
	}
	return p, nil
}

// sftpRChar sums rchar (/proc/PID/io) over the NAS host's sftp-server
// processes: the bytes the NAS itself read for the nodes' sshfs mounts.
func (b *bench) sftpRChar() int64 {
	nasNS, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", b.nas.HolderPID))
	ents, _ := os.ReadDir("/proc")
	var sum int64
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(comm)) != "sftp-server" {
			continue
		}
		if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); ns != nasNS {
			continue
		}
		io, _ := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
		for _, l := range strings.Split(string(io), "\n") {
			if v, ok := strings.CutPrefix(l, "rchar: "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				sum += n
			}
		}
	}
	return sum
}

// writeHub writes a hub with one repo whose snapshot holds 4 shards
// (size/4 each) as regular files — sshfs here refuses readlink, so the
// snapshot has no links into blobs/ — and returns their total.
func writeHub(hub string, size int64) (int64, error) {
	rd := hubcache.RepoPath(hub, repo)
	if err := os.RemoveAll(hub); err != nil {
		return 0, err
	}
	for _, d := range []string{hubcache.Blobs, filepath.Join(hubcache.Snapshots, "main1"), hubcache.Refs} {
		if err := os.MkdirAll(filepath.Join(rd, d), 0o755); err != nil {
			return 0, err
		}
	}
	var total int64
	r := rand.New(rand.NewPCG(7, 7))
	buf := make([]byte, 4<<20)
	for i := 0; i < 4; i++ {
		f, err := os.Create(filepath.Join(rd, hubcache.Snapshots, "main1", fmt.Sprintf("model-%d.safetensors", i)))
		if err != nil {
			return 0, err
		}
		for w := int64(0); w < size/4; w += int64(len(buf)) {
			n := min(int64(len(buf)), size/4-w)
			for j := 0; j+8 <= int(n); j += 8 {
				v := r.Uint64()
				for k := 0; k < 8; k++ {
					buf[j+k] = byte(v >> (8 * k))
				}
			}
			if _, err := f.Write(buf[:n]); err != nil {
				return 0, err
			}
		}
		if err := f.Close(); err != nil {
			return 0, err
		}
		total += size / 4
	}
	if err := os.WriteFile(filepath.Join(rd, hubcache.Refs, "main"), []byte("main1"), 0o644); err != nil {
		return 0, err
	}
	if total/4 < relay.MinRelaySize {
		return 0, errors.New("lane too small: each shard must be at least 4 MiB to be relayed")
	}
	return total, nil
}

func ratio(a, b int64) float64 { return float64(a) / float64(b) }

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d B", n)
	}
}

func humanMap(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+" "+human(m[k]))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
