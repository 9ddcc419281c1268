package contract

import "testing"

// The registry an image is pulled from is the host its name carries, by
// Docker's rules (docker.io without one); image_registry only overrides;
// Docker Hub by default comes after a [build]; a host listed in the
// plan's image_insecure_registries pulls insecure.
func TestPullForTakesTheImagesOwnRegistry(t *testing.T) {
	for img, want := range map[string]string{
		"nvcr.io/nvidia/vllm:25.09": "nvcr.io",
		"10.0.0.5:5000/eng:1":       "10.0.0.5:5000",
		"localhost/eng:1":           "localhost",
		"vllm/vllm-openai:v1":       DockerHub,
		"ubuntu":                    DockerHub,
		"docker.io/library/ubuntu":  DockerHub,
	} {
		if got := MustImageRef(img).Registry(); got != want {
			t.Errorf("%s: registry %s, want %s", img, got, want)
		}
	}
	plan := func(img string) LanePlan {
		return LanePlan{Nodes: []NodePlan{{Node: "h1", Image: MustImageRef(img)}, {Node: "h2", Image: MustImageRef(img)}},
			ImageInsecureRegistries: []string{"10.0.0.5:5000"}, ConfigFile: "/etc/sparklane/sparklane.toml"}
	}
	build := &Build{Context: "/nas/ctx"}
	for _, c := range []struct {
		img, registry string
		build         *Build
		only          string
		want, node    string
		insecure      bool
	}{
		{img: "10.0.0.5:5000/eng:1", want: "10.0.0.5:5000", node: "h1", insecure: true},
		{img: "10.0.0.5:5000/eng:1", build: build, only: "h2", want: "10.0.0.5:5000", node: "h2", insecure: true},
		{img: "nvcr.io/nvidia/x:1", want: "nvcr.io", node: "h1"},
		{img: "vllm/vllm:1", want: DockerHub, node: "h1"},
		{img: "vllm/vllm:1", build: build},
		{img: "vllm/vllm:1", registry: "mirror.lan:5000/team", build: build, want: "mirror.lan:5000/team", node: "h1"},
		{img: "10.0.0.5:5000/eng:1", registry: "mirror.lan", want: "mirror.lan", node: "h1"},
	} {
		r := Recipe{ImageRegistry: c.registry, ImageRegistryAuthFile: "/root/.docker/config.json", Build: c.build}
		p := r.PullFor(plan(c.img), c.only)
		switch {
		case c.want == "" && p != nil:
			t.Errorf("%+v: pull %+v, want none (the build first)", c, p)
		case c.want != "" && (p == nil || p.Registry != c.want || p.Node != c.node || p.Insecure != c.insecure || p.AuthFile != "/root/.docker/config.json" || p.ConfigFile != "/etc/sparklane/sparklane.toml"):
			t.Errorf("%+v: pull %+v", c, p)
		}
	}
	if p := (Recipe{}).PullFor(LanePlan{}, ""); p != nil {
		t.Errorf("a plan without nodes: %+v", p)
	}
}
