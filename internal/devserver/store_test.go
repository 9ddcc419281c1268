package devserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
)

// runEchoes runs n Echo workflows (echo-0 … echo-N-1) to completion on s.
func runEchoes(t *testing.T, s *Server, n int) {
	t.Helper()
	c := dial(t, s)
	defer c.Close()
	w := worker.New(c, "devserver-store-test", worker.Options{})
	w.RegisterWorkflow(Echo)
	w.RegisterActivity(Upper)
	if err := w.Start(); err != nil {
		t.Fatalf("worker start: %v", err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range n {
		id := fmt.Sprintf("echo-%d", i)
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "devserver-store-test"},
			Echo, EchoInput{Text: strings.Repeat(id+" ", 64)})
		if err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		var out EchoResult
		if err := run.Get(ctx, &out); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// writeGarbage overwrites n bytes at off in path with seeded random bytes.
func writeGarbage(t *testing.T, path string, off int64, n int) {
	t.Helper()
	garbage := make([]byte, n)
	r := rand.New(rand.NewPCG(42, uint64(off)))
	for i := range garbage {
		garbage[i] = byte(r.Uint32())
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(garbage, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// recoveryCommand is the shell command on the line after the line of the
// refusal that contains marker.
func recoveryCommand(t *testing.T, msg, marker string) string {
	t.Helper()
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		if strings.Contains(l, marker) && i+1 < len(lines) {
			return strings.TrimSpace(lines[i+1])
		}
	}
	t.Fatalf("no line containing %q followed by a command in:\n%s", marker, msg)
	return ""
}

func runShell(t *testing.T, command string) {
	t.Helper()
	if out, err := exec.Command("sh", "-c", command).CombinedOutput(); err != nil {
		t.Fatalf("sh -c %q: %v: %s", command, err, out)
	}
}

// serverProcessEnv names the state dir TestServerProcess starts a server
// on, serverRunsEnv how many Echo runs it makes there.
const (
	serverProcessEnv = "SPARKLANE_DEVSERVER_TEST_STATE_DIR"
	serverRunsEnv    = "SPARKLANE_DEVSERVER_TEST_RUNS"
)

// TestServerProcess is a child process of the store tests, not a test of
// its own: one start, some runs and a stop of the server per process, as
// the control service does it. In one process the Temporal sqlite plugin
// keeps its connections to the file after Stop (for the process's life),
// which a later start there would reuse; a fresh process leaves the store
// as a stopped service does (a WAL beside it, nothing holding it open).
func TestServerProcess(t *testing.T) {
	stateDir := os.Getenv(serverProcessEnv)
	if stateDir == "" {
		return
	}
	sink := &logSink{}
	s := startServer(t, stateDir, sink)
	n, err := strconv.Atoi(os.Getenv(serverRunsEnv))
	if err != nil {
		t.Fatalf("%s: %v", serverRunsEnv, err)
	}
	runEchoes(t, s, n)
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	for _, l := range sink.lines() {
		if strings.Contains(l, "store checked and backed up") {
			fmt.Print("CHECKED " + l)
		}
	}
}

// runServerProcess runs TestServerProcess in a child on stateDir with n
// runs and returns the debug line of its store check ("" when none).
func runServerProcess(t *testing.T, stateDir string, n int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestServerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), serverProcessEnv+"="+stateDir, serverRunsEnv+"="+strconv.Itoa(n))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("server process on %s: %v\n%s", stateDir, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(l, "CHECKED "); ok {
			return rest
		}
	}
	return ""
}

// The case, with real parts: a store made by the real server in a
// process that then stopped, 64 KiB of garbage written into its middle.
// The next start refuses it, naming the file, what quick_check found and
// the recovery, and leaves it as found; the recovery it names, run as
// written, brings the runs back.
func TestDamagedStoreIsRefusedAndBackupRestores(t *testing.T) {
	stateDir := filepath.Join(t.TempDir(), "state")
	dbPath := filepath.Join(stateDir, DBFile)
	bakPath := filepath.Join(stateDir, BackupFile)

	// First start creates the store: nothing to check, no backup yet.
	const runs = 12
	if line := runServerProcess(t, stateDir, runs); line != "" {
		t.Fatalf("first start on a new store checked it: %s", line)
	}
	if _, err := os.Stat(bakPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s after the first start (new store): %v; want none", bakPath, err)
	}

	// Second start finds a healthy store: it is checked and backed up.
	checked := runServerProcess(t, stateDir, 0)
	if !strings.Contains(checked, `"quick_check"`) || !strings.Contains(checked, `"backup"`) {
		t.Fatalf("second start logged no check with its durations (got %q)", checked)
	}
	t.Logf("healthy start: %s", strings.TrimSpace(checked))
	bak, err := os.Stat(bakPath)
	if err != nil || bak.Size() == 0 {
		t.Fatalf("backup %s after a healthy start: %v", bakPath, err)
	}
	if _, err := os.Stat(bakPath + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("backup temp file left behind: %v", err)
	}

	// 64 KiB of garbage in the middle of the stopped store.
	fi, err := os.Stat(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	const garbage = 64 << 10
	off := fi.Size() / 2
	if off < 4096 || off+garbage > fi.Size() {
		t.Fatalf("store %s is %d bytes: too small for 64 KiB of garbage past the header page", dbPath, fi.Size())
	}
	writeGarbage(t, dbPath, off, garbage)
	t.Logf("store %d bytes, backup %d bytes; wrote %d bytes of garbage at offset %d", fi.Size(), bak.Size(), garbage, off)
	damagedSum := fileSum(t, dbPath)
	walSum, hasWAL := [32]byte{}, false
	if _, err := os.Stat(dbPath + "-wal"); err == nil {
		walSum, hasWAL = fileSum(t, dbPath+"-wal"), true
	}

	// Third start: refused, naming the file, the finding and the recovery.
	_, err = Start(context.Background(), Options{StateDir: stateDir, UIPort: -1})
	var de *StoreDamagedError
	if !errors.As(err, &de) {
		t.Fatalf("Start on a damaged store: err = %v; want a *StoreDamagedError", err)
	}
	msg := err.Error()
	t.Logf("refusal:\n%s", msg)
	if de.Path != dbPath || len(de.Findings) == 0 || de.Findings[0] == "ok" || de.Backup != bakPath {
		t.Fatalf("refusal = %+v; want path %s, findings, backup %s", de, dbPath, bakPath)
	}
	for _, want := range []string{dbPath, "damaged", "quick_check", de.Findings[0], "restore the backup", bakPath, "start with an empty store, losing all history"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal does not say %q:\n%s", want, msg)
		}
	}
	if !slices.ContainsFunc(de.Findings, func(f string) bool { return strings.Contains(strings.ToLower(f), "page") }) {
		t.Errorf("findings name no page: %q", de.Findings)
	}
	if n := strings.Count(msg, "\n") + 1; n > 16 {
		t.Errorf("refusal is %d lines; starter shows the last 20 of control.log", n)
	}
	// Refused as found (its WAL not checkpointed into it either), and the
	// state dir is free again.
	if fileSum(t, dbPath) != damagedSum {
		t.Fatalf("the refused store %s was modified", dbPath)
	}
	if hasWAL && fileSum(t, dbPath+"-wal") != walSum {
		t.Fatalf("the refused store's WAL %s-wal was modified", dbPath)
	}
	if _, ok := Running(stateDir); ok {
		t.Fatalf("Running(%s) true after a refused start", stateDir)
	}
	if b, err := os.Stat(bakPath); err != nil || !b.ModTime().Equal(bak.ModTime()) || b.Size() != bak.Size() {
		t.Fatalf("backup %s changed by the refused start: %v", bakPath, err)
	}

	// The recovery, run as the refusal writes it.
	runShell(t, recoveryCommand(t, msg, "restore the backup"))
	if fileSum(t, dbPath+".damaged") != damagedSum {
		t.Fatalf("the damaged store was not moved aside to %s.damaged", dbPath)
	}
	s4 := startServer(t, stateDir, &logSink{})
	defer s4.Stop()
	c := dial(t, s4)
	defer c.Close()
	var want []string
	for i := range runs {
		want = append(want, fmt.Sprintf("echo-%d=Completed", i))
	}
	if got := listUntil(t, c, "", want...); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("after restoring the backup ListWorkflow = %v, want %v", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range []string{"echo-0", fmt.Sprintf("echo-%d", runs-1)} {
		iter := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var last string
		for iter.HasNext() {
			ev, err := iter.Next()
			if err != nil {
				t.Fatalf("history of %s after restoring the backup: %v", id, err)
			}
			last = ev.GetEventType().String()
		}
		if last != "WorkflowExecutionCompleted" {
			t.Fatalf("history of %s after restoring the backup ends with %q", id, last)
		}
	}
}

// Garbage over the header page makes the file "not a database": refused as
// damaged too, and with no backup the refusal says so and offers only the
// empty store, whose command works as written.
func TestStoreNotADatabaseWithoutBackup(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, DBFile)
	makeStore(t, dbPath, 64)
	writeGarbage(t, dbPath, 0, 4096)

	_, err := checkStore(context.Background(), dbPath)
	var de *StoreDamagedError
	if !errors.As(err, &de) {
		t.Fatalf("checkStore on a file whose header is garbage: err = %v; want a *StoreDamagedError", err)
	}
	msg := err.Error()
	if de.Backup != "" || !strings.Contains(msg, "no backup "+filepath.Join(dir, BackupFile)+" exists") ||
		!strings.Contains(msg, "not a database") || strings.Contains(msg, "restore the backup") {
		t.Fatalf("refusal without a backup:\n%s", msg)
	}
	runShell(t, recoveryCommand(t, msg, "losing all history"))
	if _, err := os.Stat(dbPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s still there after the empty-store command: %v", dbPath, err)
	}
	if _, err := os.Stat(dbPath + ".damaged"); err != nil {
		t.Fatalf("damaged file not kept aside: %v", err)
	}
}

// Garbage over data pages (the schema readable): quick_check's own lines
// are the findings, the good backup of an earlier start is kept, not
// replaced by a copy of the damage, and restoring it works as written.
func TestStoreDamagedInDataPagesKeepsTheBackup(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, DBFile)
	makeStore(t, dbPath, 500)
	if rep, err := checkStore(context.Background(), dbPath); err != nil || rep.backupErr != nil {
		t.Fatalf("checkStore on a healthy store: %v, backup: %v", err, rep.backupErr)
	}
	bakSum := fileSum(t, filepath.Join(dir, BackupFile))
	fi, err := os.Stat(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	writeGarbage(t, dbPath, fi.Size()/2, 64<<10)

	_, err = checkStore(context.Background(), dbPath)
	var de *StoreDamagedError
	if !errors.As(err, &de) {
		t.Fatalf("checkStore with garbage over data pages: err = %v; want a *StoreDamagedError", err)
	}
	if len(de.Findings) == 0 || strings.HasPrefix(de.Findings[0], "cannot read the schema") ||
		!strings.Contains(err.Error(), de.Findings[0]) || de.Backup != filepath.Join(dir, BackupFile) {
		t.Fatalf("refusal = %+v:\n%s", de, err)
	}
	if fileSum(t, filepath.Join(dir, BackupFile)) != bakSum {
		t.Fatal("the backup was replaced by a check that failed")
	}
	// The restore, as written, gives back a store that passes, with its rows.
	runShell(t, recoveryCommand(t, err.Error(), "restore the backup"))
	if _, err := checkStore(context.Background(), dbPath); err != nil {
		t.Fatalf("checkStore after restoring the backup: %v", err)
	}
	if n := countRows(t, dbPath); n != 500 {
		t.Fatalf("restored store holds %d rows, want 500", n)
	}
}

// A backup interrupted by a crash leaves temporal.db.bak.tmp; the next
// healthy start replaces it and makes a whole backup with the store's rows.
func TestBackupReplacesLeftoverTempAndHoldsTheRows(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, DBFile)
	makeStore(t, dbPath, 500)
	tmp := filepath.Join(dir, BackupFile+".tmp")
	if err := os.WriteFile(tmp, []byte("torn copy"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := checkStore(context.Background(), dbPath)
	if err != nil || rep.backupErr != nil {
		t.Fatalf("checkStore on a healthy store: %v, backup: %v", err, rep.backupErr)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s left behind: %v", tmp, err)
	}
	if n := countRows(t, filepath.Join(dir, BackupFile)); n != 500 {
		t.Fatalf("backup holds %d rows, want 500", n)
	}
	t.Logf("store %d bytes: quick_check %s, backup %s (%d bytes)", rep.size, rep.check, rep.backup, rep.backupSize)
}

// makeStore creates a WAL-mode SQLite file with n rows of 1 KiB.
func makeStore(t testing.TB, path string, n int) {
	t.Helper()
	db, err := sql.Open(sqliteDriver, "file:"+path+"?_pragma=journal_mode(wal)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("CREATE TABLE t (id INTEGER PRIMARY KEY, data BLOB)"); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := tx.Exec("INSERT INTO t (id, data) VALUES (?, ?)", i, bytes.Repeat([]byte{byte(i)}, 1024)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCheckStore is the start's cost (the check, then the backup)
// on a store of about 1 MiB (the tests' stores are 0.6-0.8 MB) and of about
// 85 MiB, to see how it grows.
func BenchmarkCheckStore(b *testing.B) {
	for _, rows := range []int{700, 64 << 10} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			dbPath := filepath.Join(b.TempDir(), DBFile)
			makeStore(b, dbPath, rows)
			var check, backup time.Duration
			var size int64
			for b.Loop() {
				rep, err := checkStore(context.Background(), dbPath)
				if err != nil || rep.backupErr != nil {
					b.Fatalf("checkStore: %v, backup: %v", err, rep.backupErr)
				}
				check, backup, size = check+rep.check, backup+rep.backup, rep.size
			}
			b.ReportMetric(float64(check.Microseconds())/1e3/float64(b.N), "check-ms/op")
			b.ReportMetric(float64(backup.Microseconds())/1e3/float64(b.N), "backup-ms/op")
			b.ReportMetric(float64(size)/(1<<20), "store-MiB")
		})
	}
}

func countRows(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open(sqliteDriver, "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatalf("count rows in %s: %v", path, err)
	}
	return n
}
