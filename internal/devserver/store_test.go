package devserver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

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
