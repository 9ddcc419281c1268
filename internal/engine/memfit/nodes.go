package memfit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sparklane/sparklane/internal/atomicfile"
)

// ReadMemTotal reads MemTotal from a /proc/meminfo file (path; empty:
// /proc/meminfo): on a DGX Spark the unified memory CPU and GPU share.
func ReadMemTotal(path string) (int64, error) { return readMemInfo(path, "MemTotal") }

// ReadMemAvailable reads MemAvailable from a /proc/meminfo file (path;
// empty: /proc/meminfo): the kernel's estimate of what a new allocation
// can get without swapping. On a DGX Spark the engine's GPU allocations
// come out of it too, so staging beside a serving lane pauses when it
// falls under [staging] min_available (internal/engine/staging.Pacer).
func ReadMemAvailable(path string) (int64, error) { return readMemInfo(path, "MemAvailable") }

// readMemInfo reads one "KEY: N kB" line of a meminfo file, in bytes.
func readMemInfo(path, key string) (int64, error) {
	if path == "" {
		path = "/proc/meminfo"
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) != 2 || fs[1] != "kB" {
			break
		}
		n, err := strconv.ParseInt(fs[0], 10, 64)
		if err != nil || n < 0 || (n == 0 && key == "MemTotal") {
			break
		}
		return n * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s line in kB", path, key)
}

// DiscoveredFile is where the starter keeps the node memory its last
// fleet probes reported (under state_dir), for the checks that run
// before a run starts (recipe check, cutover).
const DiscoveredFile = "node-memory.json"

// LoadDiscovered reads the node memory recorded under stateDir; a
// missing or unreadable file is no record.
func LoadDiscovered(stateDir string) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(filepath.Join(stateDir, DiscoveredFile))
	if err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}

// SaveDiscovered merges mem (node → bytes; zeros ignored) into the record
// under stateDir, written to a temp name and renamed.
func SaveDiscovered(stateDir string, mem map[string]int64) error {
	all := LoadDiscovered(stateDir)
	changed := false
	for n, b := range mem {
		if b > 0 && all[n] != b {
			all[n], changed = b, true
		}
	}
	if !changed {
		return nil
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	err = atomicfile.Write(filepath.Join(stateDir, DiscoveredFile), append(b, '\n'), 0o644)
	if errors.Is(err, os.ErrNotExist) {
		return nil // no state_dir yet: nothing to remember into
	}
	return err
}
