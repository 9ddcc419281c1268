package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/sparklane/sparklane/internal/testkit/simtest"
)

// Names the bench asks for: the gateway is asked by alias (its rewrite
// path), direct and nginx by the served name (the same length).
const (
	served = "bench-model"
	alias  = "bench-alias"
)

// target is one way to reach the engine.
type target struct {
	name, url, model string
}

// procs are the processes a run started, stopped at its end.
type procs []*exec.Cmd

func (p procs) stop() {
	for _, c := range p {
		c.Process.Signal(syscall.SIGTERM)
		c.Wait()
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	simBin := fs.String("engine-sim", "", "the engine-sim binary")
	nginx := fs.String("nginx", "/usr/sbin/nginx", "the nginx binary")
	dur := fs.Duration("duration", 5*time.Second, "each wrk run")
	streamN := fs.Int("stream-n", 300, "streamed requests per target (TTFT)")
	profile := fs.String("cpuprofile", "", "write the gateway process's CPU profile here")
	gwEnv := fs.String("gateway-env", "", "extra environment of the gateway process (NAME=VALUE,...), e.g. GOGC=400")
	fs.Parse(args)
	dir, err := os.MkdirTemp("", "gwbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var ps procs
	defer func() { ps.stop() }()
	engine, cmd, err := startEngine(*simBin, dir)
	if err != nil {
		return err
	}
	ps = append(ps, cmd)
	gwURL, cmd, err := startGateway(dir, engine, *profile, *gwEnv)
	if err != nil {
		return err
	}
	ps = append(ps, cmd)
	ngURL, cmd, err := startNginx(*nginx, dir, engine)
	if err != nil {
		return err
	}
	ps = append(ps, cmd)
	targets := []target{{"direct", engine, served}, {"gateway", gwURL, alias}, {"nginx", ngURL, served}}
	fmt.Printf("engine-sim %s, gateway %s, nginx %s; %d CPUs shared by the load, the proxy and the engine\n", engine, gwURL, ngURL, runtime.NumCPU())
	res := map[string]map[int]wrkResult{}
	for _, conc := range []int{1, 64} {
		for _, t := range targets {
			r, err := runWrk(dir, t, conc, *dur)
			if err != nil {
				return err
			}
			if res[t.name] == nil {
				res[t.name] = map[int]wrkResult{}
			}
			res[t.name][conc] = r
			fmt.Printf("  wrk c=%-2d %-8s p50 %8.3f ms  p99 %8.3f ms  %9.0f req/s\n", conc, t.name, r.p50, r.p99, r.rps)
		}
	}
	ttft := map[string]ttftResult{}
	for _, t := range targets {
		r, err := measureTTFT(t, *streamN)
		if err != nil {
			return err
		}
		ttft[t.name] = r
		fmt.Printf("  stream    %-8s TTFT p50 %8.3f ms  p99 %8.3f ms  (%d requests)\n", t.name, r.p50, r.p99, r.n)
	}
	report(res, ttft, *dur, *streamN)
	return nil
}

// startEngine runs engine-sim on a tiny model tree at a pace that makes
// its own time negligible, and returns its base URL.
func startEngine(bin, dir string) (string, *exec.Cmd, error) {
	if bin == "" {
		return "", nil, fmt.Errorf("--engine-sim: give the engine-sim binary")
	}
	model := filepath.Join(dir, "model")
	if err := simtest.WriteModelDir(model, simtest.Model{}); err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, model, "--served-model-name", served, "--port", "0", "--prefill-tps", "1e9", "--decode-tps", "1e9")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	line := regexp.MustCompile(`rank 0 serving .* on (http://\S+) `)
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := line.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	select {
	case u := <-urls:
		return u, cmd, nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		return "", nil, fmt.Errorf("engine-sim not serving after 30s")
	}
}

// startGateway runs this binary's serve-gateway, a route to engine.
func startGateway(dir, engine, profile, env string) (string, *exec.Cmd, error) {
	addr, err := freeAddr()
	if err != nil {
		return "", nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self, "serve-gateway", "--listen", addr, "--backend", engine, "--served", served, "--alias", alias, "--state", filepath.Join(dir, "gateway.json"), "--cpuprofile", profile)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if env != "" {
		cmd.Env = append(os.Environ(), strings.Split(env, ",")...)
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	u := "http://" + addr
	if err := waitHTTP(u + "/health"); err != nil {
		cmd.Process.Kill()
		return "", nil, err
	}
	return u, cmd, nil
}

// nginxConf is nginx as a plain reverse proxy to the engine: keep-alive
// to the upstream, HTTP/1.1, no response buffering (an event stream
// passes as it comes, as the gateway passes it), no access log (the
// gateway keeps none per request either).
const nginxConf = `worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %[1]s/tmp/body;
    proxy_temp_path %[1]s/tmp/proxy;
    fastcgi_temp_path %[1]s/tmp/fastcgi;
    uwsgi_temp_path %[1]s/tmp/uwsgi;
    scgi_temp_path %[1]s/tmp/scgi;
    client_max_body_size 32m;
    upstream engine { server %[2]s; keepalive 256; }
    server {
        listen %[3]s;
        location / {
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
        }
    }
}
`

// startNginx writes the config under dir and runs nginx in the
// foreground.
func startNginx(bin, dir, engine string) (string, *exec.Cmd, error) {
	addr, err := freeAddr()
	if err != nil {
		return "", nil, err
	}
	nd := filepath.Join(dir, "nginx")
	if err := os.MkdirAll(filepath.Join(nd, "tmp"), 0o777); err != nil {
		return "", nil, err
	}
	os.Chmod(filepath.Join(nd, "tmp"), 0o777) // nginx's workers run as another user
	conf := filepath.Join(nd, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, nd, engine[len("http://"):], addr), 0o644); err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "-p", nd, "-c", conf, "-e", filepath.Join(nd, "error.log"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("nginx: %w", err)
	}
	u := "http://" + addr
	if err := waitHTTP(u + "/health"); err != nil {
		cmd.Process.Kill()
		return "", nil, err
	}
	return u, cmd, nil
}
