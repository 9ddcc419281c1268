package hubfetch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

// killChildEnv makes the test binary a fetch that kills itself (SIGKILL)
// once half the bytes are down: a worker killed -9 mid-download, with no
// deferred cleanup run, at a point the test chooses (no sleeps, no race).
const killChildEnv = "HUBFETCH_KILL_CHILD"

func killChild() {
	total, _ := strconv.ParseInt(os.Getenv("HUBFETCH_TOTAL"), 10, 64)
	req := Request{Endpoint: os.Getenv("HUBFETCH_ENDPOINT"), CacheDir: os.Getenv("HUBFETCH_CACHE"), Repo: testRepo,
		ChunkSize: testChunk, ParallelFiles: 3, ParallelRanges: 4}
	req.Progress = func(p Progress) {
		if p.Downloaded >= total/2 {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	_, err := Fetch(context.Background(), req)
	fmt.Fprintln(os.Stderr, "the child fetch ended without being killed:", err)
	os.Exit(3)
}

// TestKill9MidDownloadResumes: a fetch process killed -9 with half the
// bytes down; the next fetch resumes every partial file and downloads at
// most the other half plus one chunk.
func TestKill9MidDownloadResumes(t *testing.T) {
	want := fixture()
	s, sha := serve(t, want)
	cache := t.TempDir()
	total := uniqueBytes(want)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killChildEnv+"=1", "HUBFETCH_ENDPOINT="+s.URL, "HUBFETCH_CACHE="+cache, "HUBFETCH_TOTAL="+strconv.FormatInt(total, 10))
	out, err := cmd.CombinedOutput()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child was not killed by SIGKILL: %v\n%s", err, out)
	}
	if len(incompletes(t, cache)) == 0 {
		t.Fatal("the killed fetch left no partial file")
	}
	res, err := fetch(t, request(s, cache))
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, cache, sha, "main", want)
	if res.DownloadedBytes > total-total/2+testChunk {
		t.Fatalf("after a kill at half of %d bytes the next fetch downloaded %d (resumed %d, reused %d blobs): more than the other half and a chunk", total, res.DownloadedBytes, res.ResumedBytes, res.ReusedFiles)
	}
	t.Logf("killed at half of %d bytes; the rerun resumed %d bytes, reused %d blobs, downloaded %d", total, res.ResumedBytes, res.ReusedFiles, res.DownloadedBytes)
}
