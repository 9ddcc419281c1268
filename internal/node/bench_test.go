package node_test

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/sparklane/sparklane/internal/node"
	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// BenchmarkCheckVsOpenSSH times node.Check (TCP, handshake, host-key check,
// auth, one session) against the OpenSSH client doing the same
// (`ssh ... true`, strict host-key checking, the same curve25519 key
// exchange our client negotiates with OpenSSH 9.2) on the same sshd, and
// reports the ratio ours/openssh.
func BenchmarkCheckVsOpenSSH(b *testing.B) {
	srv := sshdtest.Start(b)
	tg := srv.Target()
	ctx := context.Background()
	args := []string{"-p", strconv.Itoa(srv.Port), "-i", srv.IdentityFile,
		"-o", "UserKnownHostsFile=" + srv.KnownHostsFile, "-o", "StrictHostKeyChecking=yes",
		"-o", "BatchMode=yes", "-o", "KexAlgorithms=curve25519-sha256", "-o", "IdentitiesOnly=yes", "-F", "/dev/null", "root@127.0.0.1", "true"}
	if out, err := exec.Command("ssh", args...).CombinedOutput(); err != nil {
		b.Fatalf("peer ssh: %v\n%s", err, out)
	}
	versus(b, "check", "openssh", func() {
		if err := node.Check(ctx, tg, 5*time.Second); err != nil {
			b.Fatal(err)
		}
	}, func() {
		if out, err := exec.Command("ssh", args...).CombinedOutput(); err != nil {
			b.Fatalf("peer ssh: %v\n%s", err, out)
		}
	})
}

// BenchmarkDockerPingOverSSH times a Docker API call through the SSH
// stream-local forward (connection reused) against the same call on the
// local socket, and reports the overhead ratio ssh/local.
func BenchmarkDockerPingOverSSH(b *testing.B) {
	srv := sshdtest.Start(b)
	tg := srv.Target()
	ctx := context.Background()
	remote, err := node.DockerClient(ctx, "", &tg)
	if err != nil {
		b.Fatal(err)
	}
	defer remote.Close()
	local, err := node.DockerClient(ctx, "", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer local.Close()
	versus(b, "ssh", "local", func() {
		if _, err := remote.ContainerList(ctx, containerListAll); err != nil {
			b.Fatal(err)
		}
	}, func() {
		if _, err := local.ContainerList(ctx, containerListAll); err != nil {
			b.Fatal(err)
		}
	})
}

// versus times ours and peer one after the other in every iteration and
// reports each's mean (us/NAME) and the ratio ours/peer (NAME/PEERNAME).
func versus(b *testing.B, name, peerName string, ours, peer func()) {
	var tOurs, tPeer time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		ours()
		t1 := time.Now()
		peer()
		tOurs += t1.Sub(t0)
		tPeer += time.Since(t1)
		n++
	}
	b.ReportMetric(float64(tOurs.Microseconds())/float64(n), "us/"+name)
	b.ReportMetric(float64(tPeer.Microseconds())/float64(n), "us/"+peerName)
	b.ReportMetric(float64(tOurs)/float64(tPeer), name+"/"+peerName)
}

var containerListAll = container.ListOptions{All: true}
