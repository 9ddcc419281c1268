package hubmirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/staging"
	"github.com/sparklane/sparklane/internal/fault"
)

func inode(fi os.FileInfo) uint64 { return fi.Sys().(*syscall.Stat_t).Ino }

const childEnv = "HUBMIRROR_TEST_CHILD_SPEC"

// TestMain lets TestUnreadableSource re-run this binary as an unprivileged
// user (root reads every file, so EACCES needs another uid). Seals are
// never made unless a test asks for them (sealed): with the real clock,
// whether one is made depends on how long ago a file was written.
func TestMain(m *testing.M) {
	sealClock = func() time.Time { return time.Unix(0, 0) }
	if js := os.Getenv(childEnv); js != "" {
		var sp Spec
		if err := json.Unmarshal([]byte(js), &sp); err != nil {
			fmt.Println("BADSPEC", err)
			os.Exit(2)
		}
		_, err := Stage(context.Background(), sp, staging.Options{})
		typ, _ := fault.TypeOf(err)
		out, _ := json.Marshal(map[string]string{"type": typ, "err": fmt.Sprint(err)})
		fmt.Println(string(out))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Bad input: an unreadable source file fails before anything is written,
// naming the file.
func TestUnreadableSource(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test drops to uid 65534 to make a file unreadable and must run as root")
	}
	root, err := os.MkdirTemp("", "hubmirror-unreadable-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(root) })
	must(t, os.Chmod(root, 0o755))
	hub := filepath.Join(root, "nas", "hub")
	r := newRepo(t, hub, "org/model")
	ok := r.blob(testData(1, 5000), false)
	r.link(rev1, "config.json", ok)
	secret := r.blob(testData(2, 6000), false)
	r.link(rev1, "model.safetensors", secret)
	unreadable := filepath.Join(r.dir, "blobs", secret)
	must(t, os.Chmod(unreadable, 0o000))
	node := filepath.Join(root, "node")
	must(t, os.MkdirAll(node, 0o755))
	must(t, os.Chown(node, 65534, 65534))

	// The test binary's own dir is private to root: copy it out.
	self, err := os.Executable()
	must(t, err)
	bin := filepath.Join(root, "child.test")
	in, err := os.Open(self)
	must(t, err)
	out, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE, 0o755)
	must(t, err)
	_, err = io.Copy(out, in)
	must(t, err)
	in.Close()
	must(t, out.Close())

	sp := Spec{Src: hub, Dst: filepath.Join(node, "hf"), Repos: []string{"org/model"}, Roots: []string{node}}
	js, _ := json.Marshal(sp)
	cmd := exec.Command(bin)
	cmd.Env = []string{childEnv + "=" + string(js)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child as uid 65534: %v\n%s", err, b)
	}
	var got map[string]string
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	must(t, json.Unmarshal([]byte(lines[len(lines)-1]), &got))
	t.Logf("child error: %s", got["err"])
	if got["type"] != fault.SourceMissing || !strings.Contains(got["err"], unreadable) || !strings.Contains(got["err"], "read access") {
		t.Fatalf("unreadable source: got %v, want SourceMissing naming %s", got, unreadable)
	}
	if _, err := os.Lstat(sp.Dst); err == nil {
		t.Fatalf("unreadable source: dst %s was written", sp.Dst)
	}
}

// Bad input: ENOSPC in the middle of a copy says so clearly and keeps the
// copy's temp file; a rerun after freeing space resumes it and copies only
// what is missing, each byte once.
func TestENOSPCMidCopy(t *testing.T) {
	node, hub, r := smallNode(t)
	want := map[string][]byte{}
	for i := 0; i < 3; i++ {
		b := testData(uint64(800+i), 2<<20)
		p := fmt.Sprintf("model-%d.safetensors", i)
		r.link(rev1, p, r.blob(b, false))
		want[p] = b
	}
	filler := filepath.Join(node, "filler")
	must(t, os.WriteFile(filler, make([]byte, 3<<20), 0o644))
	sp := Spec{Src: hub, Dst: filepath.Join(node, "hf"), Repos: []string{"org/model"}, Roots: []string{node}}
	res, err := Stage(context.Background(), sp, staging.Options{Parallel: 1})
	wantType(t, err, fault.NoSpace, "disk full", sp.Dst)
	t.Logf("ENOSPC error: %v", err)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("NoSpace error does not wrap ENOSPC: %v", err)
	}
	// The copy the full disk stopped is kept for the rerun, whole up to
	// where the disk filled.
	left := tmpLeft(t, sp.Dst)
	if len(left) != 1 {
		t.Fatalf("temp files after ENOSPC: %v, want the one copy in progress kept", left)
	}
	if res.CopiedFiles != 2 {
		t.Fatalf("before ENOSPC %+v: want 2 files finished", res)
	}
	fi, err := os.Stat(left[0])
	must(t, err)
	first := res.CopiedBytes
	must(t, os.Remove(filler))
	res, err = Stage(context.Background(), sp, staging.Options{Parallel: 1})
	must(t, err)
	if res.CopiedFiles != 1 || res.CopiedBytes != 2<<20-fi.Size() || res.VerifiedFiles+res.AdoptedFiles != 2 {
		t.Fatalf("rerun after freeing space %+v: want only the rest of the missing file (%d of its bytes were kept) copied", res, fi.Size())
	}
	if first+res.CopiedBytes != 3*2<<20 {
		t.Fatalf("the two passes copied %d+%d bytes, want each of the 3 files' bytes once", first, res.CopiedBytes)
	}
	if left := tmpLeft(t, sp.Dst); len(left) != 0 {
		t.Fatalf("temp files left after the rerun: %v", left)
	}
	for p, b := range want {
		fileEquals(t, filepath.Join(sp.Dst, "hub", "models--org--model", "snapshots", rev1, p), b)
	}
}
