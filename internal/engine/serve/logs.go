package serve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// maxSignatureScan bounds how much of a rank's log FindInLogs reads.
const maxSignatureScan = 256 << 20

// FindInLogs reads the container's log (stdout and stderr, from its
// start) and returns the needles no line contains, in their order. It
// stops reading as soon as every needle was seen.
func FindInLogs(ctx context.Context, d Docker, name string, needles []string) ([]string, error) {
	ins, err := d.ContainerInspect(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", name, err)
	}
	rc, err := d.ContainerLogs(ctx, ins.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return nil, fmt.Errorf("logs of %s: %w", name, err)
	}
	defer rc.Close()
	var src io.Reader = rc
	if ins.Config == nil || !ins.Config.Tty {
		pr, pw := io.Pipe()
		go func() { _, err := stdcopy.StdCopy(pw, pw, rc); pw.CloseWithError(err) }()
		defer pr.Close()
		src = pr
	}
	left := map[string]bool{}
	for _, n := range needles {
		left[n] = true
	}
	sc := bufio.NewScanner(io.LimitReader(src, maxSignatureScan))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for len(left) > 0 && sc.Scan() {
		line := sc.Text()
		for n := range left {
			if strings.Contains(line, n) {
				delete(left, n)
			}
		}
	}
	if err := sc.Err(); err != nil && len(left) > 0 {
		return nil, fmt.Errorf("read logs of %s: %w", name, err)
	}
	var missing []string
	for _, n := range needles {
		if left[n] {
			missing = append(missing, n)
		}
	}
	return missing, nil
}
