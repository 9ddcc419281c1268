package itest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// docker-compose.temporal.yml parses and pins every image.
func TestComposeFileIsValidAndPinned(t *testing.T) {
	file := filepath.Join("..", "..", "docker-compose.temporal.yml")
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
}
