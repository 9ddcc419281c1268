package devserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kballard/go-shellquote"
)

// BackupFile is the copy of the store kept under StateDir: the SQLite file
// as it was at the last start that found it healthy, so a damaged store
// can be replaced by it instead of by an empty one.
const BackupFile = DBFile + ".bak"

// sqliteDriver is the database/sql driver name of modernc.org/sqlite (pure
// Go), registered by the Temporal server's sqlite plugin that this package
// links: the check opens the store with the very driver the server uses.
const sqliteDriver = "sqlite"

// SQLite primary result codes meaning the file itself is damaged (the
// driver's errors carry the extended code; the low byte is the primary).
const (
	sqliteCorrupt = 11 // SQLITE_CORRUPT: "database disk image is malformed"
	sqliteNotADB  = 26 // SQLITE_NOTADB: "file is not a database"
)

// shownFindings is how many of quick_check's findings an error quotes:
// enough to see what is wrong, few enough that the refusal fits the tail
// of control.log that starter prints.
const shownFindings = 4

// StoreDamagedError refuses a SQLite store that fails PRAGMA quick_check:
// the server would start on it and fail later, one request at a time
// (histories whose pages are damaged answer HTTP 500 in the UI), so the
// operator must choose, knowingly, between the backup and an empty store.
type StoreDamagedError struct {
	// Path is the damaged SQLite file.
	Path string
	// Findings are quick_check's first lines (or SQLite's error when the
	// file cannot even be read as a database).
	Findings []string
	// Backup is the backup's path, "" when none exists; BackupTime is when
	// it was taken (runs after it are lost when it is restored).
	Backup     string
	BackupTime time.Time
}

func (e *StoreDamagedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "devserver: the embedded Temporal store %s is damaged; refusing to start on it (the server would fail later on the damaged pages, e.g. histories answering HTTP 500). PRAGMA quick_check found:", e.Path)
	shown := e.Findings
	if len(shown) > shownFindings {
		shown = shown[:shownFindings]
	}
	for _, f := range shown {
		fmt.Fprintf(&b, "\n    %s", f)
	}
	if n := len(e.Findings) - len(shown); n > 0 {
		fmt.Fprintf(&b, "\n    (%d more)", n)
	}
	// A -wal or -shm left beside the file belongs to the damaged store: a
	// WAL replayed onto a restored copy would damage it again. They are
	// looked for now, when the refusal is shown, so the commands name the
	// files the operator finds (the check is over and nothing runs).
	aside := e.Path + ".damaged"
	mv := shellquote.Join("mv", e.Path, aside)
	for _, sfx := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(e.Path + sfx); err == nil {
			mv += " && " + shellquote.Join("mv", e.Path+sfx, aside+sfx)
		}
	}
	b.WriteString("\nRecover with one of (nothing was changed; history is never dropped silently):")
	if e.Backup != "" {
		fmt.Fprintf(&b, "\n  - restore the backup taken at the last healthy start, %s (runs since then are lost):\n      %s && %s",
			e.BackupTime.Local().Format(time.RFC3339), mv, shellquote.Join("cp", e.Backup, e.Path))
	} else {
		fmt.Fprintf(&b, "\n  - (no backup %s exists: one is taken at each start that finds the store healthy)", filepath.Join(filepath.Dir(e.Path), BackupFile))
	}
	fmt.Fprintf(&b, "\n  - or move the damaged file aside and start with an empty store, losing all history:\n      %s", mv)
	b.WriteString("\nthen start the control service again.")
	return b.String()
}

// storeReport is what checkStore measured, for the start's debug log.
type storeReport struct {
	size          int64
	check, backup time.Duration
	backupSize    int64
	backupErr     error
}

// checkStore runs PRAGMA quick_check on the existing store at dbPath and,
// when it passes, replaces StateDir/temporal.db.bak with a consistent copy
// of it. It returns a *StoreDamagedError when the check fails. The caller
// holds the state dir's lock, so nothing writes the store meanwhile.
//
// quick_check reads every page once and verifies the b-tree structure
// (page headers, cell bounds, free list, overflow chains, record formats),
// skipping only the index-versus-table cross-check of integrity_check: it
// is what catches garbage written over pages, at the cost of one
// sequential read of the file.
//
// The backup is made with VACUUM INTO a temporary name (a read
// transaction, so a snapshot, compacted), fsynced, then renamed over the
// previous backup and the directory fsynced: a crash at any point leaves
// the previous backup or the new one whole, never a torn copy. A failed
// backup is reported in storeReport, not as an error: the store itself is
// healthy and the previous backup stays in place.
//
// Cost, both growing with the file (BenchmarkCheckStore, 2 busy cores):
// a 0.9 MiB store (what a few dozen runs leave) takes about 30 ms to check
// and 65 ms to back up; an 85 MiB one about 0.6 s and 0.9 s.
func checkStore(ctx context.Context, dbPath string) (storeReport, error) {
	var rep storeReport
	fi, err := os.Stat(dbPath)
	if err != nil {
		return rep, fmt.Errorf("devserver: stat %s: %w", dbPath, err)
	}
	rep.size = fi.Size()
	// Read-only: the check never changes the store, not even by the
	// checkpoint a read-write connection runs as it closes (a refused
	// store stays as found); a WAL left beside it is still read, as the
	// server would read it.
	dsn := (&url.URL{Scheme: "file", Path: dbPath, RawQuery: "mode=ro"}).String()
	db, err := sql.Open(sqliteDriver, dsn)
	if err != nil {
		return rep, fmt.Errorf("devserver: open %s: %w", dbPath, err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		if isDamage(err) {
			return rep, damaged(dbPath, []string{err.Error()})
		}
		return rep, fmt.Errorf("devserver: open %s: %w", dbPath, err)
	}
	defer conn.Close()

	begin := time.Now()
	findings, err := quickCheck(ctx, conn)
	rep.check = time.Since(begin)
	switch {
	case err != nil && !isDamage(err):
		return rep, fmt.Errorf("devserver: PRAGMA quick_check on %s: %w", dbPath, err)
	case err != nil && len(findings) == 0:
		// The schema itself is unreadable, so quick_check cannot even be
		// prepared: ask again ignoring schema errors, to say which pages.
		findings = []string{"cannot read the schema: " + err.Error()}
		if _, perr := conn.ExecContext(ctx, "PRAGMA writable_schema = ON"); perr == nil {
			if more, _ := quickCheck(ctx, conn); !isOK(more) {
				findings = append(findings, more...)
			}
		}
		return rep, damaged(dbPath, findings)
	case err != nil || !isOK(findings):
		return rep, damaged(dbPath, findings)
	}

	begin = time.Now()
	rep.backupSize, rep.backupErr = backup(ctx, conn, dbPath)
	rep.backup = time.Since(begin)
	return rep, nil
}

// quickCheck returns quick_check's findings, one per line ("ok" alone
// when there are none), and the error that may end them: on a damaged file
// SQLite stops the answer with SQLITE_CORRUPT after the lines it found.
func quickCheck(ctx context.Context, conn *sql.Conn) ([]string, error) {
	// No limit argument: the default (100 findings) is what SQLite
	// answers reliably; an error quotes only the first few anyway.
	rows, err := conn.QueryContext(ctx, "PRAGMA quick_check")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return out, err
		}
		// A row may hold several findings, one per line; the header of
		// the list names the schema ("main"), the only one: no finding.
		for _, line := range strings.Split(v, "\n") {
			if line != "" && !strings.HasPrefix(line, "*** in database ") {
				out = append(out, line)
			}
		}
	}
	return out, rows.Err()
}

func isOK(findings []string) bool { return len(findings) == 1 && findings[0] == "ok" }

// backup writes the copy beside dbPath (see checkStore) and returns its size.
func backup(ctx context.Context, conn *sql.Conn, dbPath string) (int64, error) {
	dst := filepath.Join(filepath.Dir(dbPath), BackupFile)
	tmp := dst + ".tmp"
	// VACUUM INTO refuses an existing non-empty target: clear what a crash
	// mid-backup left.
	for _, leftover := range []string{tmp, tmp + "-journal", tmp + "-wal"} {
		if err := os.Remove(leftover); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("devserver: remove leftover %s: %w", leftover, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "VACUUM INTO ?", tmp); err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("devserver: back up %s to %s: %w", dbPath, tmp, err)
	}
	// VACUUM INTO does not fsync its output.
	if err := syncFile(tmp); err != nil {
		_ = os.Remove(tmp)
		return 0, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.Remove(tmp)
		return 0, fmt.Errorf("devserver: rename %s to %s: %w", tmp, dst, err)
	}
	if err := syncFile(filepath.Dir(dst)); err != nil {
		return 0, err
	}
	fi, err := os.Stat(dst)
	if err != nil {
		return 0, fmt.Errorf("devserver: stat %s: %w", dst, err)
	}
	return fi.Size(), nil
}

// isDamage says err is SQLite finding the file corrupt or not a database
// at all, as opposed to failing to read it (permission, I/O), which is
// reported as it is.
func isDamage(err error) bool {
	var coded interface{ Code() int }
	if !errors.As(err, &coded) {
		return false
	}
	switch coded.Code() & 0xff {
	case sqliteCorrupt, sqliteNotADB:
		return true
	}
	return false
}

func damaged(dbPath string, findings []string) *StoreDamagedError {
	e := &StoreDamagedError{Path: dbPath, Findings: findings}
	bak := filepath.Join(filepath.Dir(dbPath), BackupFile)
	if fi, err := os.Stat(bak); err == nil && fi.Mode().IsRegular() {
		e.Backup, e.BackupTime = bak, fi.ModTime()
	}
	return e
}
