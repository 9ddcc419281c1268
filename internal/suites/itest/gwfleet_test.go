package itest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
	"github.com/sparklane/sparklane/internal/demo"
	"github.com/sparklane/sparklane/internal/testkit/testworker"
)

// The gateway suite's fleet (gateway_test.go, gateway_bench_test.go):
// the gateway (issue 54) on real parts, one fleet for every case. A real
// Temporal server inside a real control service process (`worker dev`,
// the test worker's, started by `starter control start`), which starts
// each gateway as its own process; engine-sim containers on this
// machine's Docker; clients through the official OpenAI Go SDK and curl.
//
// Cluster gw (nodes g1, g2) runs one lane at a time: gw-a (served name
// model-a), gw-b (model-b) and gw-c (model-c), each reached by the alias
// "chat" too (their recipes' [gateway] aliases); gw-a's head answers on
// one port, gw-b's and gw-c's on another. Two gateways front it: main
// (the clients') and tight (hold_timeout 5s, max_held 3, and no other
// traffic, so its gauges count exactly what a case sends it). One API
// key (its sha256 in api_keys_file) may ask for chat, model-a and
// model-c. Staging passes hold at 4 MiB while the release file is absent
// (the test worker's fault point): a cutover that stages after the stop
// keeps the cluster's names held until the test lets it go.

// gwCluster is the suite's cluster; gwMain and gwTight its gateways.
const (
	gwCluster = "gw"
	gwMain    = "main"
	gwTight   = "tight"
	gwPauseAt = 4 << 20
)

// gwServed are the lanes' served model names.
var gwServed = map[string]string{"gw-a": "model-a", "gw-b": "model-b", "gw-c": "model-c"}

// gwFleet is the gateway suite's fleet.
type gwFleet struct {
	*procFleet
	dc *dockerclient.Client
	// key is the API key the clients send (only its sha256 is on disk).
	key string
	// url and metrics are each gateway's base URL and metrics address.
	url, metrics map[string]string
	// healRun is the keeper run that healed gw-a (saved once it ended).
	healRun string

	mu      sync.Mutex
	outputs []string      // every starter's output: the key must be absent
	c       client.Client // tc's
}

// gwOptions shape the fleet: tight adds the tight gateway.
type gwOptions struct{ tight bool }

func newGWFleet(t *testing.T, o gwOptions) *gwFleet {
	t.Helper()
	ctx := withTimeout(t, 10*time.Minute)
	dc, image := buildSimImage(ctx, t)
	bin := buildBinary(t, "starter")
	dir := t.TempDir()
	nas, err := demo.GenerateNAS(filepath.Join(dir, "nas"), 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	recipes := filepath.Join(dir, "recipes")
	gwRecipes(t, recipes, image, nas)
	g := &gwFleet{dc: dc, key: "sk-gw-" + randomHex(t, 24), url: map[string]string{}, metrics: map[string]string{}}
	sum := sha256.Sum256([]byte(g.key))
	keys := filepath.Join(dir, "api-keys")
	if err := os.WriteFile(keys, []byte("# the gateway suite's one key\nsha256:"+hex.EncodeToString(sum[:])+" chat,model-a,model-c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "state_dir = %q\nrecipes_dir = %q\nhf_cache_dir = %q\nshared_roots = [%q]\nprobe_grace = \"2s\"\nkeep = { interval = \"1s\", restarts = 3, window = \"1h\" }\n\n",
		filepath.Join(dir, "state"), recipes, nas.Hub, filepath.Dir(nas.Hub))
	fmt.Fprintf(&cfg, "[temporal]\nport = %d\nui_port = %d\n\n", ephemeralPort(t), ephemeralPort(t))
	for _, n := range []string{"g1", "g2"} {
		root := filepath.Join(dir, "nodes", n)
		if err := os.MkdirAll(filepath.Join(root, "srv", "sparklane"), 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&cfg, "[[nodes]]\nname = %q\naddress = \"127.0.0.1\"\nroots = [\"/srv/sparklane\"]\nfs_root = %q\n\n", n, root)
	}
	fmt.Fprintf(&cfg, "[[clusters]]\nname = %q\nnodes = [\"g1\", \"g2\"]\n\n[staging]\nmin_available = \"0\"\n", gwCluster)
	names := []string{gwMain}
	if o.tight {
		names = append(names, gwTight)
	}
	for _, name := range names {
		listen, metrics := fmt.Sprintf("127.0.0.1:%d", ephemeralPort(t)), fmt.Sprintf("127.0.0.1:%d", ephemeralPort(t))
		g.url[name], g.metrics[name] = "http://"+listen, metrics
		fmt.Fprintf(&cfg, "\n[[gateways]]\nname = %q\nlisten = %q\napi_keys_file = %q\nmetrics_address = %q\n", name, listen, keys, metrics)
		if name == gwTight {
			cfg.WriteString("hold_timeout = \"5s\"\nmax_held = 3\n")
		}
	}
	cfgFile := filepath.Join(dir, "sparklane.toml")
	if err := os.WriteFile(cfgFile, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	g.procFleet = &procFleet{t: t, dir: dir, cfgFile: cfgFile, state: filepath.Join(dir, "state"), starter: bin, release: filepath.Join(dir, "release")}
	g.env = append(os.Environ(), testControlEnv(t), fmt.Sprintf("%s=%d", testworker.PauseAtEnv, gwPauseAt), testworker.ReleaseEnv+"="+g.release)
	if err := os.WriteFile(g.release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.cleanup)
	if code, out := g.starter(ctx, "control", "start"); code != 0 {
		t.Fatalf("control start: exit %d\n%s", code, out)
	}
	for _, name := range names {
		g.waitGateway(ctx, t, name, 0)
	}
	return g
}

// gwRecipes writes lanes gw-a (the demo's demo-4x on cluster gw) and
// gw-b, gw-c (demo-2x's) into dir: each its own served name (engine-sim
// serves the model repo under it), the alias chat, its own dst.
func gwRecipes(t *testing.T, dir, image string, nas demo.NAS) {
	t.Helper()
	demoDir := t.TempDir()
	if err := demo.WriteRecipes(demoDir, image, nas, freePort(t)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for lane, from := range map[string]string{"gw-a": "demo-4x", "gw-b": "demo-2x", "gw-c": "demo-2x"} {
		b, err := os.ReadFile(filepath.Join(demoDir, from+".toml"))
		if err != nil {
			t.Fatal(err)
		}
		body := strings.ReplaceAll(string(b), from, lane)
		for _, r := range [][2]string{
			{fmt.Sprintf("cluster = %q", lane), fmt.Sprintf("cluster = %q", gwCluster)},
			{`aliases = ["d4"]`, ""}, {`aliases = ["d2"]`, ""},
			{"/engine-sim /hub --served-model-name {model}", "/engine-sim /hub/models--demo--sim-model --served-model-name " + gwServed[lane]},
			{`dst = "/srv/sparklane/hf"`, fmt.Sprintf(`dst = "/srv/sparklane/%s/hf"`, lane)},
			{`dst = "/srv/sparklane/engram"`, fmt.Sprintf(`dst = "/srv/sparklane/%s/engram"`, lane)},
		} {
			if !strings.Contains(body, r[0]) && !strings.HasPrefix(r[0], "aliases") {
				t.Fatalf("recipe %s has no %q to replace", from, r[0])
			}
			body = strings.ReplaceAll(body, r[0], r[1])
		}
		body += "\n# The names clients may ask the gateway for, beside model-x.\n[gateway]\naliases = [\"chat\"]\n"
		if err := os.WriteFile(filepath.Join(dir, lane+".toml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// cleanup stops the control service and its gateways (their processes
// by the pids in their locks, if a stop left one) and removes the lanes'
// containers.
func (g *gwFleet) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_ = os.WriteFile(g.release, nil, 0o644)
	g.run(ctx, "control", "stop", "--gateways")
	for name := range g.url {
		if o, held := control.FindFile(control.GatewayLockPath(g.state, name)); held && o.PID > 0 {
			_ = syscall.Kill(o.PID, syscall.SIGKILL)
		}
	}
	if o, held := control.Find(g.state); held && o.PID > 0 {
		_ = syscall.Kill(o.PID, syscall.SIGKILL)
	}
	for lane := range gwServed {
		cs, _ := g.dc.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "sparklane.lane="+lane))})
		for _, c := range cs {
			if n := c.Labels["sparklane.node"]; n == "g1" || n == "g2" {
				_ = g.dc.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			}
		}
	}
}

// starter runs `starter ARGS...` to its end and keeps its output.
func (g *gwFleet) starter(ctx context.Context, args ...string) (int, string) {
	code, out := g.run(ctx, args...)
	g.mu.Lock()
	g.outputs = append(g.outputs, out)
	g.mu.Unlock()
	return code, out
}

// decodeJSON decodes the first JSON object of out (a starter's output,
// progress lines before it) into v.
func decodeJSON(out string, v any) error {
	i := strings.Index(out, "{")
	if i < 0 {
		return fmt.Errorf("no JSON object in %q", out)
	}
	return json.NewDecoder(strings.NewReader(out[i:])).Decode(v)
}

// cutover runs `starter --json cutover ARGS...`: exit code and result.
func (g *gwFleet) cutover(ctx context.Context, t *testing.T, args ...string) (int, contract.CutoverResult, string) {
	t.Helper()
	code, out := g.starter(ctx, append([]string{"--json", "cutover"}, args...)...)
	var res contract.CutoverResult
	if err := decodeJSON(out, &res); err != nil {
		t.Fatalf("cutover %v: exit %d, no result: %v\n%s", args, code, err, out)
	}
	return code, res, out
}

// waitGateway waits until gateway name's process holds its lock with a
// pid other than not, publishes its listen address and answers /health.
func (g *gwFleet) waitGateway(ctx context.Context, t *testing.T, name string, not int) control.Owner {
	t.Helper()
	for {
		o, held := control.FindFile(control.GatewayLockPath(g.state, name))
		if held && o.PID != not && o.Listen != "" {
			if resp, err := http.Get("http://" + o.Listen + "/health"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return o
				}
			}
		}
		select {
		case <-ctx.Done():
			log, _ := os.ReadFile(control.GatewayLogPath(g.state, name))
			t.Fatalf("gateway %s: no process (other than pid %d) serves: lock %+v held %v\nits log:\n%s", name, not, o, held, log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// table is gateway name's route table as it keeps it on disk.
func (g *gwFleet) table(t *testing.T, name string) contract.GatewayTableFile {
	t.Helper()
	var tf contract.GatewayTableFile
	b, err := os.ReadFile(filepath.Join(g.state, "gateway", name+".json"))
	if err != nil {
		t.Fatalf("gateway %s's table: %v", name, err)
	}
	if err := json.Unmarshal(b, &tf); err != nil {
		t.Fatalf("gateway %s's table: %v\n%s", name, err, b)
	}
	return tf
}

// route is gateway name's route of the cluster (ok false: none).
func (g *gwFleet) route(t *testing.T, name string) (contract.GatewayRoute, bool) {
	t.Helper()
	for _, r := range g.table(t, name).Routes {
		if r.Cluster == gwCluster {
			return r, true
		}
	}
	return contract.GatewayRoute{}, false
}

// waitRoute polls gateway name's route until ok says so.
func (g *gwFleet) waitRoute(ctx context.Context, t *testing.T, name, what string, ok func(contract.GatewayRoute) bool) contract.GatewayRoute {
	t.Helper()
	for {
		r, found := g.route(t, name)
		if found && ok(r) {
			return r
		}
		select {
		case <-ctx.Done():
			t.Fatalf("gateway %s: route of %s not %s: %+v (found %v)", name, gwCluster, what, r, found)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// serving says whether a route serves lane.
func serving(lane string) func(contract.GatewayRoute) bool {
	return func(r contract.GatewayRoute) bool { return r.Lane == lane && r.State == contract.GatewayServing }
}

// events are the history of workflow id's run ("" the latest).
func (g *gwFleet) events(ctx context.Context, t *testing.T, id, run string) []*historypb.HistoryEvent {
	t.Helper()
	it := g.tc(ctx).GetWorkflowHistory(ctx, id, run, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var out []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s %s: %v", id, run, err)
		}
		out = append(out, e)
	}
	return out
}

// saveRun writes workflow id's run ("" the latest) as history name, as
// saveHistory does (with SPARKLANE_WRITE_HISTORIES set).
func (g *gwFleet) saveRun(ctx context.Context, t *testing.T, id, run, name string) {
	t.Helper()
	if os.Getenv("SPARKLANE_WRITE_HISTORIES") == "" {
		return
	}
	h := &historypb.History{Events: g.events(ctx, t, id, run)}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "..", "..", "workflows", "testdata", "histories", name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote history %s (%d events)", name, len(h.Events))
}

// checkAnsweredBy counts the answered calls by lane: each must carry a
// lane of lanes in Sparklane-Lane and its served name as model.
func checkAnsweredBy(t *testing.T, calls []gwCall, lanes ...string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, c := range calls {
		if !c.ok() {
			continue
		}
		found := false
		for _, l := range lanes {
			found = found || (c.Model == gwServed[l] && c.Lane == l)
		}
		if !found {
			t.Errorf("a call was answered by model %q, Sparklane-Lane %q: want one of lanes %v with its served name", c.Model, c.Lane, lanes)
			continue
		}
		n[c.Lane]++
	}
	return n
}

// tc is a Temporal client of the running control service (dialled
// again after restartControl).
func (g *gwFleet) tc(ctx context.Context) client.Client {
	g.mu.Lock()
	c := g.c
	g.mu.Unlock()
	if c == nil {
		c = g.client(ctx)
		g.mu.Lock()
		g.c = c
		g.mu.Unlock()
	}
	return c
}
