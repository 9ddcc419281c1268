package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/testkit/sshdtest"
)

// BinDir is where Debian's postgresql package puts the server programs
// (/usr/lib/postgresql/VERSION/bin; .ci/run installs the package when it
// is missing): the newest version installed.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestV := "", -1
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if _, serr := os.Stat(filepath.Join(d, "initdb")); err == nil && serr == nil && v > bestV {
			best, bestV = d, v
		}
	}
	if best == "" {
		return "", errors.New("pgtest: no /usr/lib/postgresql/VERSION/bin/initdb: install Debian's postgresql package (apt-get install postgresql)")
	}
	return best, nil
}

// RunAs is the system user the server runs as when the test runs as root
// (postgres refuses to run as root); the package creates it.
const RunAs = "postgres"

const (
	// dirPrefix names the servers' directories under the temp dir;
	// ownerFile in each holds the pid of the test process that owns it.
	dirPrefix = "pgtest-"
	ownerFile = "owner.pid"
)

// reclaim stops the servers and removes the directories of test
// processes that are gone (killed before their cleanup ran): a postmaster
// does not die with the process that started it.
func reclaim(bin string, logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		pg := &Postgres{bin: bin, Dir: dir}
		out, err := pg.command(ctx, "pg_ctl", "-D", pg.data(), "-m", "immediate", "-w", "-t", "30", "stop").CombinedOutput()
		cancel()
		if err != nil && !strings.Contains(string(out), "PID file") && !strings.Contains(string(out), "not running") {
			logf("pgtest: the server in %s of the gone test process %d does not stop: %v\n%s", dir, pid, err, out)
			continue
		}
		os.RemoveAll(dir)
		logf("pgtest: removed %s, left by test process %d", dir, pid)
	}
}

// Postgres is one running PostgreSQL server owned by a test.
type Postgres struct {
	// Host and Port are where it accepts TCP connections (loopback).
	Host string
	Port int
	// User and Password are the superuser initdb created (password auth,
	// scram-sha-256, on every connection).
	User, Password string
	// Dir holds the data directory, the socket and Log.
	Dir string
	// Log is the server's log file (for failure messages).
	Log string
	bin string
}

// Options configure Start.
type Options struct {
	// User is the superuser's name (default "temporal").
	User string
}

// Start runs initdb into a fresh directory and starts the server on a free
// loopback port, and stops it and removes the directory when the test
// ends. It fails the test, never skips, when the programs are missing.
func Start(t testing.TB, opt Options) *Postgres {
	t.Helper()
	if opt.User == "" {
		opt.User = "temporal"
	}
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	reclaim(bin, t.Logf)
	// Not t.TempDir: its parents are 0700 root's, which the postgres user
	// cannot traverse.
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	pw := make([]byte, 12)
	_, _ = rand.Read(pw)
	pg := &Postgres{bin: bin, Host: "127.0.0.1", Port: sshdtest.FreePort(t), User: opt.User, Password: hex.EncodeToString(pw), Dir: dir, Log: filepath.Join(dir, "postgres.log")}
	t.Cleanup(func() { pg.stop(t); os.RemoveAll(dir) })
	pwFile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwFile, []byte(pg.Password+"\n"), 0o600); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := pg.chown(dir, pwFile); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := pg.command(ctx, "initdb", "-D", pg.data(), "-U", opt.User, "--pwfile", pwFile,
		"--auth", "scram-sha-256", "--encoding", "UTF8", "--locale", "C.UTF-8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb %s: %v\n%s", pg.data(), err, out)
	}
	// Loopback only; no fsync (a test's server dies with the test, and
	// the machine is shared); the socket in Dir, not /run/postgresql.
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=%s -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
		pg.Port, dir, pg.Host)
	if out, err := pg.command(ctx, "pg_ctl", "-D", pg.data(), "-l", pg.Log, "-o", opts, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(pg.Log)
		t.Fatalf("pgtest: pg_ctl start on %s:%d: %v\n%s\nlog %s:\n%s", pg.Host, pg.Port, err, out, pg.Log, log)
	}
	return pg
}

// Addr is host:port.
func (pg *Postgres) Addr() string { return net.JoinHostPort(pg.Host, strconv.Itoa(pg.Port)) }

func (pg *Postgres) data() string { return filepath.Join(pg.Dir, "data") }

// command runs a server program as RunAs when this process is root.
func (pg *Postgres) command(ctx context.Context, prog string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(pg.bin, prog), args...)
	if os.Geteuid() == 0 {
		uid, gid, err := lookup()
		if err == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		}
	}
	cmd.Dir = pg.Dir
	return cmd
}

// chown gives paths to RunAs when this process is root.
func (pg *Postgres) chown(paths ...string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid, err := lookup()
	if err != nil {
		return err
	}
	for _, p := range paths {
		if err := os.Chown(p, int(uid), int(gid)); err != nil {
			return fmt.Errorf("pgtest: chown %s to %s: %w", p, RunAs, err)
		}
	}
	return nil
}

func lookup() (uint32, uint32, error) {
	u, err := user.Lookup(RunAs)
	if err != nil {
		return 0, 0, fmt.Errorf("pgtest: user %s (created by Debian's postgresql package; postgres refuses to run as root): %w", RunAs, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uint32(uid), uint32(gid), nil
}

// stop shuts the server down fast (pg_ctl -m immediate: the data dies
// with the test), bounded.
func (pg *Postgres) stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := os.Stat(filepath.Join(pg.data(), "postmaster.pid")); err != nil {
		return
	}
	if out, err := pg.command(ctx, "pg_ctl", "-D", pg.data(), "-m", "immediate", "-w", "-t", "30", "stop").CombinedOutput(); err != nil &&
		!strings.Contains(string(out), "not running") {
		t.Errorf("pgtest: pg_ctl stop %s: %v\n%s", pg.data(), err, out)
	}
}
