package testworker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/contract"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Nothing armed is no seams; a bad value is an error naming the variable.
func TestFromEnv(t *testing.T) {
	s, err := FromEnv(envOf(nil))
	if s != nil || err != nil {
		t.Fatalf("empty environment: %+v, %v; want no seams", s, err)
	}
	for env, want := range map[string]map[string]string{
		PauseAtEnv:     {PauseAtEnv: "lots"},
		FetchHoldAtEnv: {FetchHoldAtEnv: "-1"},
		FetchMarkerEnv: {FetchHoldAtEnv: "10"},
		ImageHoldAtEnv: {ImageHoldAtEnv: "0"},
		ImageMarkerEnv: {ImageHoldAtEnv: "3", ReleaseEnv: "/r"},
	} {
		if _, err := FromEnv(envOf(want)); err == nil || !strings.Contains(err.Error(), env) {
			t.Errorf("%v: %v, want an error naming %s", want, err, env)
		}
	}
	dir := t.TempDir()
	s, err = FromEnv(envOf(map[string]string{PauseAtEnv: "5", ReleaseEnv: filepath.Join(dir, "r"), BootIDDirEnv: dir,
		FetchHoldAtEnv: "7", FetchMarkerEnv: filepath.Join(dir, "m"), ImageHoldAtEnv: "3", ImageMarkerEnv: filepath.Join(dir, "i")}))
	if err != nil || s == nil || s.StageHold == nil || s.BootID == nil || s.FetchProgress == nil || s.ImageLayers == nil || s.BenchWritten != nil {
		t.Fatalf("armed: %+v, %v", s, err)
	}
}

// A pause holds a pass at its byte count until the release file exists;
// below the count, disarmed or released, it lets the pass go; a held pass
// is let go when its context ends.
func TestStagePause(t *testing.T) {
	rel := filepath.Join(t.TempDir(), "release")
	p := NewStagePause(100, rel)
	ctx := context.Background()
	if p.Hold(ctx, "l", "b", contract.StageProgress{BytesDone: 99}) != nil {
		t.Fatal("held below the count")
	}
	ch := p.Hold(ctx, "l", "b", contract.StageProgress{BytesDone: 100})
	if ch == nil {
		t.Fatal("not held at the count")
	}
	select {
	case <-ch:
		t.Fatal("let go before the release file exists")
	default:
	}
	if err := os.WriteFile(rel, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	<-ch
	if p.Hold(ctx, "l", "b", contract.StageProgress{BytesDone: 500}) != nil {
		t.Fatal("held while the release file exists")
	}
	if err := os.Remove(rel); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	ch = p.Hold(cctx, "l", "b", contract.StageProgress{BytesDone: 500})
	if ch == nil {
		t.Fatal("not held once the release file is gone again")
	}
	cancel()
	<-ch

	p.Arm(0)
	if p.Hold(ctx, "l", "b", contract.StageProgress{BytesDone: 500}) != nil {
		t.Fatal("held while disarmed")
	}
	q := NewStagePause(1, "")
	ch = q.Hold(ctx, "l", "b", contract.StageProgress{BytesDone: 1})
	q.Release()
	<-ch
	if q.Hold(ctx, "l", "b", contract.StageProgress{BytesDone: 1}) != nil {
		t.Fatal("held after Release")
	}
}

// The fetch kill point writes the count it reached and blocks that fetch
// and every later one; below the count it lets bytes through.
func TestFetchKillPoint(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	hook := FetchKillPoint(1000, marker)
	hook(context.Background(), "org/m", 999)
	if _, ok, err := ReadMarker(marker); ok || err != nil {
		t.Fatalf("marker below the count: %v %v", ok, err)
	}
	blocked := make(chan struct{})
	go func() { hook(context.Background(), "org/m", 1500); close(blocked) }()
	var n int64
	for deadline := time.Now().Add(time.Minute); ; {
		var ok bool
		var err error
		if n, ok, err = ReadMarker(marker); err != nil {
			t.Fatal(err)
		} else if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no marker within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n != 1500 {
		t.Fatalf("marker %d, want 1500", n)
	}
	later := make(chan struct{})
	go func() { hook(context.Background(), "org/m", 10); close(later) }()
	select {
	case <-blocked:
		t.Fatal("the fetch at the kill point went on")
	case <-later:
		t.Fatal("a fetch after the kill point went on")
	default:
	}
}

// An image hold lets layer counts below its own through; at its count,
// without the release file, it writes the marker and holds until the
// file exists (or the transfer's context ends); released, it holds no more.
func TestImageHold(t *testing.T) {
	dir := t.TempDir()
	h := &ImageHold{At: 3, Marker: filepath.Join(dir, "held"), Release: filepath.Join(dir, "release")}
	ctx := context.Background()
	if err := h.Layers(ctx, "n", "img:1", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.Marker); err == nil {
		t.Fatal("marker written below the count")
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Layers(cctx, "n", "img:1", 3) }()
	var b []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ = os.ReadFile(h.Marker); len(b) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if string(b) != "img:1 3\n" {
		t.Fatalf("marker %q, want the image and its layer count", b)
	}
	select {
	case err := <-done:
		t.Fatalf("let go before the release file exists: %v", err)
	default:
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a hold whose context ended returned no error")
	}
	if err := os.WriteFile(h.Release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.Layers(ctx, "n", "img:1", 4); err != nil {
		t.Fatalf("released: %v", err)
	}
}
