package relay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sparklane/sparklane/internal/engine/hubmirror"
)

// helperEnv makes the test binary a node worker's receiver (see TestMain):
// it runs one relay job from a peer and, once a given number of bytes of a
// file are fsynced, says so on stdout and waits to be killed.
const helperEnv = "SPARKLANE_RELAY_TEST_HELPER"

type helperSpec struct {
	Job     Job      `json:"job"`
	ID      Identity `json:"id"`
	PauseAt int64    `json:"pause_at"`
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(runHelper(spec))
	}
	os.Exit(m.Run())
}

func runHelper(spec string) int {
	var h helperSpec
	if err := json.Unmarshal([]byte(spec), &h); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctls, err := ClientTLS(h.ID)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	h.Job.OnChunk = func(rel string, synced int64) {
		if synced == h.PauseAt {
			fmt.Println("PAUSED", rel, synced)
			select {} // held here until killed
		}
	}
	rcv := &Receiver{Registry: NewRegistry(), TLS: ctls}
	if _, err := rcv.Run(context.Background(), h.Job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("DONE")
	return 0
}

// A receiving node worker killed -9 mid-file resumes where it stopped:
// within the same boot from all it wrote (the chunk in flight too, written
// and not yet fsynced: the kernel has it), after a reboot from its last
// fsynced chunk (the rest of the temp file may be anything). The restarted
// receiver re-copies only what follows, from the same peer, in chunks on
// the chunk grid. The helper process is killed where it holds after a
// chunk's fsync; what it would have written of the next chunk before the
// kill is appended by the test: the next bytes of the file within the
// boot, junk under another boot's id (a reboot's stand-in).
func TestKilledReceiverResumesWhereItStopped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reboot bool
	}{{"same boot", false}, {"after a reboot", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, 2, 4<<20+77)
			fl := f.files[0]
			n1, n2 := f.nodes[0], f.nodes[1]
			// n1 reads the NAS and keeps serving.
			j1 := f.job(n1)
			j1.Nodes = []string{"n1", "n2"}
			if _, err := n1.rcv.Run(context.Background(), j1); err != nil {
				t.Fatal(err)
			}
			j2 := f.job(n2)
			j2.Nodes = []string{"n1", "n2"}
			pauseAt := int64(3 * testChunk)
			spec, err := json.Marshal(helperSpec{Job: j2, ID: n2.id, PauseAt: pauseAt})
			must(t, err)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+string(spec))
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			must(t, err)
			must(t, cmd.Start())
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("helper ended before pausing: %v", err)
			}
			t.Logf("helper: %s", line)
			must(t, cmd.Process.Kill()) // SIGKILL: no cleanup runs
			cmd.Wait()
			tmp := filepath.Join(n2.mirror, filepath.Dir(fl.Rel), "."+filepath.Base(fl.Rel)+".sparklane-tmp")
			st, err := os.Stat(tmp)
			if err != nil {
				t.Fatalf("no temp file after the kill: %v", err)
			}
			if st.Size() != pauseAt {
				t.Fatalf("temp file holds %d B, want the %d B fsynced before the pause", st.Size(), pauseAt)
			}
			// Half the chunk in flight when the worker died: written, never
			// fsynced.
			half := f.data[fl.Rel][pauseAt : pauseAt+testChunk/2]
			want := pauseAt + testChunk/2
			if tc.reboot {
				half = make([]byte, testChunk/2)
				want = pauseAt
				must(t, unix.Setxattr(tmp, hubmirror.BootXattr, []byte(otherBoot), 0))
			}
			tf, err := os.OpenFile(tmp, os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			_, err = tf.Write(half)
			must(t, err)
			must(t, tf.Close())

			// The worker is back: a new process state, the same disk.
			var synced []int64
			j2.OnChunk = func(rel string, off int64) { synced = append(synced, off) }
			start := time.Now()
			r, err := n2.rcv.Run(context.Background(), j2)
			must(t, err)
			f.checkMirrors(n2)
			recopied := r.FromPeers["n1"]
			t.Logf("resumed at %d B; re-copied %d B of %d (%s)", r.Resumed, recopied, fl.Size, strconv.FormatFloat(time.Since(start).Seconds(), 'f', 2, 64))
			if r.Resumed != want {
				t.Errorf("resumed at %d, want %d", r.Resumed, want)
			}
			if recopied != fl.Size-want {
				t.Errorf("re-copied %d B from n1, want only the rest %d", recopied, fl.Size-want)
			}
			for _, off := range synced {
				if off%testChunk != 0 && off != fl.Size {
					t.Errorf("a chunk fsynced at %d, off the %d B grid (offsets %v)", off, testChunk, synced)
				}
			}
		})
	}
}

// A temp file is trusted by when and by whom it was written. Written in
// this boot (hubmirror.BootXattr), all of it is kept. Else (a reboot since,
// or no boot mark): this engine marks its own (every chunk fdatasynced
// before the next), so all but the chunk holding the last byte are kept;
// hubmirror's carry no mark (its flush trails its copy by an interval, one
// chunk here), so two chunks less are. A mark with another chunk size is
// honoured, then replaced before this pass writes on. The staged file
// keeps no mark.
func TestResumeTrustsATempFileByItsWriter(t *testing.T) {
	defer hubmirror.SetChunkSize(testChunk)() // hubmirror's chunk, in the same units
	defer hubmirror.SetFlushChunks(1)()
	for _, tc := range []struct {
		name string
		mark int64 // 0: none
		boot bool  // marked as written in this boot
		want int64 // resumed bytes
	}{
		{"this engine's", testChunk, false, 3 * testChunk},
		{"hubmirror's", 0, false, 2 * testChunk},
		{"marked with a larger chunk", 2 * testChunk, false, 2 * testChunk},
		{"this engine's, this boot", testChunk, true, 3*testChunk + testChunk/2},
		{"hubmirror's, this boot", 0, true, 3*testChunk + testChunk/2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, 1, 4*testChunk+77)
			fl, nd := f.files[0], f.nodes[0]
			dir := filepath.Join(nd.mirror, filepath.Dir(fl.Rel))
			tmp := filepath.Join(dir, "."+filepath.Base(fl.Rel)+".sparklane-tmp")
			must(t, os.MkdirAll(dir, 0o755))
			// Three and a half chunks on disk when the writer stopped.
			must(t, os.WriteFile(tmp, f.data[fl.Rel][:3*testChunk+testChunk/2], 0o600))
			if tc.mark > 0 {
				must(t, unix.Setxattr(tmp, hubmirror.SyncedChunkXattr, []byte(strconv.FormatInt(tc.mark, 10)), 0))
			}
			if tc.boot {
				// A file this boot wrote: what the stager's or the
				// receiver's own creation marks it with.
				of, err := os.OpenFile(tmp, os.O_RDWR, 0)
				must(t, err)
				hubmirror.MarkBoot(of)
				must(t, of.Close())
				if _, err := unix.Getxattr(tmp, hubmirror.BootXattr, nil); err != nil {
					t.Fatalf("MarkBoot left no %s on %s: %v", hubmirror.BootXattr, tmp, err)
				}
			}
			r, err := nd.rcv.Run(context.Background(), f.job(nd))
			must(t, err)
			f.checkMirrors(nd)
			if r.Resumed != tc.want {
				t.Errorf("resumed %d bytes, want %d", r.Resumed, tc.want)
			}
			if r.Written != fl.Size-tc.want {
				t.Errorf("wrote %d bytes of %d after resuming %d, want the rest %d", r.Written, fl.Size, r.Resumed, fl.Size-tc.want)
			}
			for _, x := range []string{hubmirror.SyncedChunkXattr, hubmirror.BootXattr} {
				if _, err := unix.Getxattr(filepath.Join(nd.mirror, fl.Rel), x, nil); err == nil {
					t.Errorf("the staged file kept the temp file's mark %s", x)
				}
			}
		})
	}
}
