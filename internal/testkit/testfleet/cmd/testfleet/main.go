package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sparklane/sparklane/internal/testkit/testfleet"
)

const usage = `usage:
  scripts/testfleet up N [--name NAME] [--docker] [--subnet X]
  scripts/testfleet status [NAME]
  scripts/testfleet down [NAME | --all]
  scripts/testfleet exec NAME NODE CMD...   (NODE is 1..N; runs on the node's console)
Fleets live under ` + testfleet.DefaultBase + `/NAME (default name "tf").
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testfleet:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	switch args[0] {
	case "up":
		fs := flag.NewFlagSet("up", flag.ContinueOnError)
		name := fs.String("name", "tf", "fleet name ([a-z][a-z0-9]{0,7})")
		docker := fs.Bool("docker", false, "start a dockerd on every node")
		subnet := fs.Int("subnet", 0, "third octet of 10.231.X.0/24 (0: derived from the name)")
		if len(args) < 2 {
			return fmt.Errorf("up: how many nodes?\n%s", usage)
		}
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("up: node count %q: %w", args[1], err)
		}
		if err := fs.Parse(args[2:]); err != nil {
			return err
		}
		start := time.Now()
		f, err := testfleet.Up(context.Background(), testfleet.Options{Name: *name, Nodes: n, Docker: *docker, Subnet: *subnet, Persistent: true})
		if err != nil {
			return err
		}
		fmt.Printf("fleet %s up in %s\n", f.Name(), time.Since(start).Round(time.Millisecond))
		return status(f)
	case "status":
		names := args[1:]
		if len(names) == 0 {
			var err error
			if names, err = testfleet.List(""); err != nil {
				return err
			}
			if len(names) == 0 {
				fmt.Println("no fleet under", testfleet.DefaultBase)
				return nil
			}
		}
		for _, name := range names {
			f, err := testfleet.Open("", name)
			if err != nil {
				return err
			}
			if err := status(f); err != nil {
				return err
			}
		}
		return nil
	case "down":
		names := args[1:]
		if len(names) == 0 {
			names = []string{"tf"}
		} else if names[0] == "--all" {
			var err error
			if names, err = testfleet.List(""); err != nil {
				return err
			}
		}
		for _, name := range names {
			start := time.Now()
			if err := testfleet.Down("", name, nil); err != nil {
				return err
			}
			fmt.Printf("fleet %s down in %s\n", name, time.Since(start).Round(time.Millisecond))
		}
		return nil
	case "exec":
		if len(args) < 4 {
			return fmt.Errorf("exec: NAME NODE CMD...\n%s", usage)
		}
		f, err := testfleet.Open("", args[1])
		if err != nil {
			return err
		}
		i, err := strconv.Atoi(strings.TrimPrefix(args[2], "h"))
		if err != nil || i < 1 || i > len(f.Nodes()) {
			return fmt.Errorf("exec: node %q: choose 1..%d", args[2], len(f.Nodes()))
		}
		cmd := f.Command(f.Node(i), args[3:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		return cmd.Run()
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

func status(f *testfleet.Fleet) error {
	fmt.Printf("fleet %s: bridge %s %s/24, dir %s\n", f.Name(), f.Bridge(), f.ControlIP(), f.Dir())
	fmt.Printf("  known_hosts %s\n  identity    %s\n  NAS         %s (read-only at %s on nodes)\n", f.KnownHostsFile(), f.IdentityFile(), f.NASDir(), testfleet.NASPath)
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE\tSSH\tNETNS\tSSHD\tDOCKER")
	for _, n := range f.Nodes() {
		sshd := "down"
		if c, err := f.SSHClient(n, 2*time.Second); err == nil {
			c.Close()
			sshd = fmt.Sprintf("up (pid %d)", n.SSHDPID)
		}
		docker := "-"
		if n.DockerSocket != "" {
			docker = n.DockerSocket
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", n.DockerPID)); n.DockerPID == 0 || err != nil {
				docker += " (dockerd not running)"
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", n.Name, n.SSHAddr(), n.NetNS, sshd, docker)
	}
	return tw.Flush()
}
