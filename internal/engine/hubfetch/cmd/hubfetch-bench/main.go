package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sparklane/sparklane/internal/engine/hubfetch"
)

func main() {
	endpoint := flag.String("endpoint", hubfetch.EndpointFromEnv(), "Hub endpoint")
	cache := flag.String("cache", "", "hub cache dir (absolute)")
	repo := flag.String("repo", "", "repo id, org/name")
	rev := flag.String("revision", "main", "branch, tag or commit")
	skip := flag.String("skip", "", "comma-separated skip globs")
	files := flag.Int("files", 0, "parallel files (0: default)")
	ranges := flag.Int("ranges", 0, "parallel ranges per large file (0: default)")
	chunk := flag.Int64("chunk", 0, "chunk size in bytes (0: default)")
	flag.Parse()

	tok, src, err := hubfetch.TokenFromEnv()
	if err != nil {
		log.Fatal(err)
	}
	req := hubfetch.Request{
		Endpoint: *endpoint, Token: tok, TokenSource: src, CacheDir: *cache, Repo: *repo, Revision: *rev,
		ParallelFiles: *files, ParallelRanges: *ranges, ChunkSize: *chunk,
	}
	if *skip != "" {
		req.Skip = strings.Split(*skip, ",")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	t0 := time.Now()
	res, err := hubfetch.Fetch(ctx, req)
	el := time.Since(t0)
	out := struct {
		hubfetch.Result
		Seconds float64 `json:"seconds"`
		MiBps   float64 `json:"mib_per_s"`
	}{res, el.Seconds(), float64(res.DownloadedBytes) / (1 << 20) / el.Seconds()}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	if err != nil {
		fmt.Fprintln(os.Stderr, "hubfetch-bench:", err)
		os.Exit(1)
	}
}
