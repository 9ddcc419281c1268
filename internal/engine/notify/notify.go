package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Notice is what the operator is told.
type Notice struct {
	Cluster string `json:"cluster"`
	Lane    string `json:"lane"`
	State   string `json:"state"`
	Reason  string `json:"reason"`
}

// timeout bounds one notice: a hung hook must not hold a keeper.
const timeout = 30 * time.Second

// isURL reports whether target is a webhook rather than a command.
func isURL(target string) bool {
	return strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://")
}

// Describe names target for a history without its query or user info
// (a webhook's token often rides there): "webhook https://host/path" or
// "command".
func Describe(target string) string {
	if !isURL(target) {
		return "command"
	}
	u, err := url.Parse(target)
	if err != nil {
		return "webhook"
	}
	return "webhook " + u.Scheme + "://" + u.Host + u.Path
}

// Send delivers n to target: a URL is POSTed n as JSON (any 2xx is
// delivered), anything else is run by sh -c with SPARKLANE_CLUSTER,
// SPARKLANE_LANE, SPARKLANE_STATE and SPARKLANE_REASON set.
func Send(ctx context.Context, target string, n Notice) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if isURL(target) {
		return post(ctx, target, n)
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", target)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"SPARKLANE_CLUSTER=" + n.Cluster, "SPARKLANE_LANE=" + n.Lane, "SPARKLANE_STATE=" + n.State, "SPARKLANE_REASON=" + n.Reason}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("notify command failed: %w; its output: %s: fix the command (it runs with sh -c on the control host)", err, tail(out))
	}
	return nil
}

func post(ctx context.Context, target string, n Notice) error {
	body, _ := json.Marshal(n)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("notify webhook %s: %w", Describe(target), err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL, query and all
		}
		return fmt.Errorf("notify webhook %s: %w", Describe(target), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("notify webhook %s answered %s: %s", Describe(target), resp.Status, tail(b))
	}
	return nil
}

// tail is the last 300 bytes of out, trimmed.
func tail(out []byte) string {
	s := strings.TrimSpace(string(out))
	if len(s) > 300 {
		s = "…" + s[len(s)-300:]
	}
	return s
}
