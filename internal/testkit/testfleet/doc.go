// Package testfleet builds a fleet of N "hosts" on this one machine so tests
// of multi-host behaviour (fleet install over SSH, node outages, partitions,
// relay staging) run against real separate hosts: each node has its own
// network namespace with an IP on a bridge the fleet creates, its own mount
// namespace (its own /mnt/nvme, /var/lib/sparklane, /etc/sparklane,
// /usr/local/lib/sparklane, a read-only NAS at /mnt/nas), its own OpenSSH
// sshd on NODEIP:22 and, optionally, its own dockerd. Everything it creates
// is listed in a state file
// under /run/sparklane-testfleet/NAME so Down can remove a fleet left behind
// by a killed run.
//
// In a test (root required; it fails, never skips, when a part is missing):
//
//	f := testfleet.New(t, testfleet.Options{Name: "mypkg", Nodes: 3, Docker: true})
//	n := f.Node(2)
//	f.SSH(n, "ls /mnt/nas")               // over its sshd at n.SSHAddr()
//	f.Exec(n, "ip", "addr")               // at its console (nsenter)
//	f.LinkDown(n); f.LinkUp(n)            // pull and replug its cable
//	f.KillNode(ctx, n)                    // power cut (StartSSHD/StartDocker to boot)
//	cfgNode := f.Target(n)                // known_hosts + identity for internal/node
//	dockerHost := "unix://" + n.DockerSocket
//
// By hand: scripts/testfleet up 3 [--docker], status, down.
//
// Test kit: production code must not import it (the relay benchmark and tests
// do).
package testfleet
