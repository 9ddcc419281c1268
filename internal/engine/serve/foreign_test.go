package serve_test

import (
	"context"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/sparklane/sparklane/internal/engine/serve"
)

// TestFindForeignNamesGPUAndPortHolders: on a real Docker engine, running
// containers sparklane did not start are foreign when they claim GPUs
// (here through NVIDIA_VISIBLE_DEVICES, what the nvidia runtime reads) or
// hold the lane's port on the host network; sparklane's own lane
// containers and unrelated containers are not.
func TestFindForeignNamesGPUAndPortHolders(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx := context.Background()
	run := func(name string, cfg container.Config, hc container.HostConfig) {
		t.Helper()
		cfg.Image, cfg.Cmd, cfg.Labels = img, []string{"sleep"}, testLabels
		c, err := d.ContainerCreate(ctx, &cfg, &hc, nil, nil, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })
		if err := d.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gpu, host, idle := lane+"-gpu", lane+"-hostnet", lane+"-idle"
	run(gpu, container.Config{Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}, container.HostConfig{})
	run(host, container.Config{}, container.HostConfig{NetworkMode: "host"})
	run(idle, container.Config{Env: []string{"NVIDIA_VISIBLE_DEVICES=void"}}, container.HostConfig{})
	startRank(t, ctx, d, spec(lane, "foreign-n1", 0, "h", img, "sleep"))
	// Port 18000 is "listened on" by this host for the test.
	fs, err := serve.FindForeign(ctx, d, []int{18000}, func(p int) bool { return p == 18000 })
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fs {
		if strings.HasPrefix(f.Name, lane) {
			got[f.Name] = f.Why
		}
	}
	if got[gpu] != "GPUs" || got[host] != "port 18000" || len(got) != 2 {
		t.Errorf("foreign %v, want %s (GPUs) and %s (port 18000) only", got, gpu, host)
	}
	// Nothing listens on the port: the host-network container holds nothing.
	fs, _ = serve.FindForeign(ctx, d, []int{18000}, func(int) bool { return false })
	for _, f := range fs {
		if f.Name == host {
			t.Errorf("host-network container foreign without a listener: %+v", f)
		}
	}
	// StopForeign stops (never removes) and refuses a lane's container.
	stopped, err := serve.StopForeign(ctx, d, []string{gpu})
	if err != nil || len(stopped) != 1 {
		t.Fatalf("stop foreign: %v %v", stopped, err)
	}
	if ins, err := d.ContainerInspect(ctx, gpu); err != nil || ins.State.Running {
		t.Errorf("after StopForeign: %v running=%v, want stopped and kept", err, err == nil && ins.State.Running)
	}
	if _, err := serve.StopForeign(ctx, d, []string{serve.ContainerName(lane, 0)}); err == nil || !strings.Contains(err.Error(), "belongs to lane "+lane) {
		t.Errorf("StopForeign on a lane container: %v", err)
	}
}
