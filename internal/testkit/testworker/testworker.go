package testworker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
)

// The test worker's environment (cmd/testworker).
const (
	// FetchHoldAtEnv is a byte count: once a Hub fetch has downloaded that
	// many bytes, the worker writes the count to the file FetchMarkerEnv
	// names and blocks the fetch, for the test to kill it (FetchKillPoint).
	FetchHoldAtEnv = "SPARKLANE_TESTWORKER_FETCH_HOLD_AT"
	FetchMarkerEnv = "SPARKLANE_TESTWORKER_FETCH_MARKER"
	// PauseAtEnv is a byte count: staging passes hold there until the
	// file ReleaseEnv names exists (StagePause).
	PauseAtEnv   = "SPARKLANE_TESTWORKER_PAUSE_AT"
	ReleaseEnv   = "SPARKLANE_TESTWORKER_RELEASE"
	BootIDDirEnv = "SPARKLANE_TESTWORKER_BOOT_ID_DIR" // node N's boot id is the file N there (BootIDs)
	// ImageHoldAtEnv is a layer count: a receiving node that made that
	// many of an image's layers durable writes "IMAGE LAYERS" to the file
	// ImageMarkerEnv names and holds the transfer's loads there until the
	// file ReleaseEnv names exists (ImageHold).
	ImageHoldAtEnv = "SPARKLANE_TESTWORKER_IMAGE_HOLD_AT"
	ImageMarkerEnv = "SPARKLANE_TESTWORKER_IMAGE_MARKER"
)

// FromEnv builds the seams the test worker's environment arms (getenv
// reads it), or nil when it arms none. A variable that does not parse is
// an error naming it.
func FromEnv(getenv func(string) string) (*activities.Seams, error) {
	var s activities.Seams
	armed := false
	if v := getenv(FetchHoldAtEnv); v != "" {
		at, err := byteCount(FetchHoldAtEnv, v)
		if err != nil {
			return nil, err
		}
		marker := getenv(FetchMarkerEnv)
		if marker == "" {
			return nil, fmt.Errorf("%s is set but %s is not: name the file the fetch fault point writes its byte count to", FetchHoldAtEnv, FetchMarkerEnv)
		}
		s.FetchProgress, armed = FetchKillPoint(at, marker), true
	}
	if v := getenv(PauseAtEnv); v != "" {
		at, err := byteCount(PauseAtEnv, v)
		if err != nil {
			return nil, err
		}
		s.StageHold, armed = NewStagePause(at, getenv(ReleaseEnv)).Hold, true
	}
	if dir := getenv(BootIDDirEnv); dir != "" {
		s.BootID, armed = BootIDs(dir), true
	}
	if v := getenv(ImageHoldAtEnv); v != "" {
		h, err := imageHoldFromEnv(getenv, v)
		if err != nil {
			return nil, err
		}
		s.ImageLayers, armed = h.Layers, true
	}
	if !armed {
		return nil, nil
	}
	return &s, nil
}

func byteCount(name, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a byte count above 0", name, v)
	}
	return n, nil
}

// FetchKillPoint is the fetch fault point of a kill -9 test
// (activities.Seams.FetchProgress): once a fetch has downloaded at least
// at bytes, it writes that count to marker (whole, by a rename) and
// blocks that fetch, and every fetch after it, for good. The test waits
// for the marker and kills the worker's process with SIGKILL; nothing
// here kills anything.
func FetchKillPoint(at int64, marker string) func(ctx context.Context, repo string, downloaded int64) {
	var fired atomic.Bool
	return func(_ context.Context, repo string, downloaded int64) {
		if !fired.Load() && downloaded < at {
			return
		}
		if !fired.Swap(true) {
			if err := writeMarker(marker, downloaded); err != nil {
				fmt.Fprintf(os.Stderr, "testworker: fetch fault point (%s at %d bytes): %v\n", repo, downloaded, err)
			}
		}
		select {} // until the test's SIGKILL
	}
}

func writeMarker(path string, n int64) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(n, 10)+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadMarker reads the byte count a FetchKillPoint wrote to path; ok is
// false while there is none.
func ReadMarker(path string) (n int64, ok bool, err error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	n, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("fetch marker %s: %q is not a byte count", path, b)
	}
	return n, true, nil
}

// StagePause is the staging fault point (activities.Seams.StageHold): a
// pass whose bytes done reach the armed count holds there, heartbeating
// its progress with Paused set, until it is released — the release file
// exists, or Release was called — or its activity ends. Tests stop a pass
// at a known place, mid-copy with fsynced bytes on disk, to kill a worker
// or a CLI there without racing a sleep against the copy speed.
type StagePause struct {
	at          atomic.Int64
	releaseFile string
	released    atomic.Bool
}

// NewStagePause holds passes at at bytes (0: none until Arm) until
// releaseFile exists ("": only Release lets them go).
func NewStagePause(at int64, releaseFile string) *StagePause {
	p := &StagePause{releaseFile: releaseFile}
	p.at.Store(at)
	return p
}

// Arm makes passes that reach at bytes from now on hold (at <= 0: none
// do). Passes already held stay held.
func (p *StagePause) Arm(at int64) { p.at.Store(at) }

// Release lets every held pass, and every later one, through.
func (p *StagePause) Release() { p.released.Store(true) }

func (p *StagePause) isReleased() bool {
	if p.released.Load() {
		return true
	}
	if p.releaseFile == "" {
		return false
	}
	_, err := os.Stat(p.releaseFile)
	return err == nil
}

// Hold is the seam: nil when the pass goes on, else a channel closed once
// the pause is released (or ctx ends).
func (p *StagePause) Hold(ctx context.Context, _, _ string, pr contract.StageProgress) <-chan struct{} {
	at := p.at.Load()
	if at <= 0 || pr.BytesDone < at || p.isReleased() {
		return nil
	}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for !p.isReleased() {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return ch
}

// BootIDs is the boot id seam (activities.Seams.BootID) reading node N's
// boot id from the file N in dir: workers on one test machine share its
// kernel, so a test simulates a reboot by writing a new id there. A
// missing file is "" (the kernel's id).
func BootIDs(dir string) func(node string) string {
	return func(node string) string {
		b, err := os.ReadFile(filepath.Join(dir, node))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
}

func imageHoldFromEnv(getenv func(string) string, v string) (*ImageHold, error) {
	at, err := strconv.Atoi(v)
	if err != nil || at <= 0 {
		return nil, fmt.Errorf("%s=%q: want a layer count above 0", ImageHoldAtEnv, v)
	}
	marker, release := getenv(ImageMarkerEnv), getenv(ReleaseEnv)
	if marker == "" || release == "" {
		return nil, fmt.Errorf("%s is set but %s or %s is not: name the file the image hold writes when it holds, and the file whose presence lets it go", ImageHoldAtEnv, ImageMarkerEnv, ReleaseEnv)
	}
	return &ImageHold{At: at, Marker: marker, Release: release}, nil
}

// ImageHold is the image transfer fault point (activities.Seams.ImageLayers):
// a receiver that made At or more of an image's layers durable, while the
// file Release does not exist, writes "IMAGE LAYERS" to Marker (whole, by
// a rename) and holds its loads until Release exists or the transfer's
// context ends. A test waits for the marker, stops the node's Docker (or
// its worker) at that layer boundary, and creates Release; nothing here
// stops anything.
type ImageHold struct {
	At              int
	Marker, Release string
}

// Layers is the seam.
func (h *ImageHold) Layers(ctx context.Context, _, image string, layers int) error {
	if layers < h.At || h.released() {
		return nil
	}
	tmp := h.Marker + ".tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%s %d\n", image, layers)), 0o644); err != nil {
		return fmt.Errorf("image hold marker: %w", err)
	}
	if err := os.Rename(tmp, h.Marker); err != nil {
		return fmt.Errorf("image hold marker: %w", err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !h.released() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func (h *ImageHold) released() bool {
	_, err := os.Stat(h.Release)
	return err == nil
}
