package itest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// docker-compose.temporal.yml parses and pins every image.
func TestComposeFileIsValidAndPinned(t *testing.T) {
	file := filepath.Join("..", "..", "..", "docker-compose.temporal.yml")
	var cmd *exec.Cmd
	switch {
	case exec.Command("docker", "compose", "version").Run() == nil:
		cmd = exec.Command("docker", "compose", "-f", file, "config")
	case func() bool { _, err := exec.LookPath("docker-compose"); return err == nil }():
		cmd = exec.Command("docker-compose", "-f", file, "config")
	default:
		t.Fatal("neither `docker compose` nor docker-compose is installed: apt-get install docker-compose (.ci/run does)")
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		l := strings.TrimSpace(line)
		if !strings.HasPrefix(l, "image:") {
			continue
		}
		img := strings.TrimSpace(strings.TrimPrefix(l, "image:"))
		if !strings.Contains(img, ":") || strings.HasSuffix(img, ":latest") {
			t.Errorf("image %q is not pinned to a version", img)
		}
	}
	for _, svc := range []string{"postgresql", "temporal-schema", "temporal", "temporal-setup", "temporal-ui", "healthcheck", "temporal-pgdata"} {
		if !strings.Contains(string(out), svc) {
			t.Errorf("compose config lacks %s", svc)
		}
	}
	// The metrics profile: Prometheus and Grafana, pinned, loopback only,
	// mounting the scrape config and dashboard files that exist.
	args := append(append([]string(nil), cmd.Args[:len(cmd.Args)-1]...), "--profile", "metrics", "config")
	mout, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, mout)
	}
	for _, want := range []string{"prom/prometheus:v2.55.1", "grafana/grafana:11.3.1", "--web.listen-address=127.0.0.1:9090", "GF_SERVER_HTTP_ADDR: 127.0.0.1", "network_mode: host"} {
		if !strings.Contains(string(mout), want) {
			t.Errorf("compose --profile metrics config lacks %q", want)
		}
	}
	for _, f := range []string{"prometheus.yml", "grafana-dashboard.json", "grafana/datasources.yml", "grafana/dashboards.yml"} {
		if _, err := os.Stat(filepath.Join("..", "..", "metrics", "deploy", f)); err != nil {
			t.Errorf("the metrics profile mounts internal/metrics/deploy/%s: %v", f, err)
		}
	}
}
