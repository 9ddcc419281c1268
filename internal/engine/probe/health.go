package probe

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Health asks url once (a keeper's cheap check: /health or /v1/models)
// and returns its HTTP status. Anything but 200 within timeout is an
// error naming the URL and what came back.
func Health(ctx context.Context, url string, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	authorize(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s does not answer: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, trim(string(body), 200))
	}
	return resp.StatusCode, nil
}
