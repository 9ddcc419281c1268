package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/sparklane/sparklane/internal/atomicfile"
	"github.com/sparklane/sparklane/internal/testkit/hubtest"
)

// manifest tells a script what to download and from where.
type manifest struct {
	URL    string `json:"url"`
	Repo   string `json:"repo"`
	Commit string `json:"commit"`
	Bytes  int64  `json:"bytes"`
	Files  []file `json:"files"`
}

type file struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	LFS  bool   `json:"lfs"`
	ETag string `json:"etag"`
}

func main() {
	repo := flag.String("repo", "bench/model", "repo id to serve")
	total := flag.Int64("bytes", 1<<30, "bytes of large (LFS) files in all")
	large := flag.Int("files", 8, "large files the bytes are spread over")
	small := flag.Int("small", 20, "small (git) files of 4-64 KiB besides them")
	rate := flag.Int64("rate", 0, "bytes per second each connection may send (0: no cap)")
	cdn := flag.Bool("cdn", false, "serve LFS bytes from a second server (absolute redirects, as the public Hub), so huggingface_hub's own client can download too")
	out := flag.String("manifest", "", "write the manifest here (default: stdout)")
	flag.Parse()
	if *large <= 0 || *total < int64(*large) {
		log.Fatalf("hubserve: -bytes %d over -files %d: want at least a byte a file", *total, *large)
	}

	r := hubtest.Repo{ID: *repo, LFSThreshold: 1 << 20}
	per := *total / int64(*large)
	for i := range *large {
		size := per
		if i == *large-1 {
			size = *total - per*int64(*large-1)
		}
		r.Files = append(r.Files, hubtest.File{Path: fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, *large), Size: size, Seed: uint64(i + 1)})
	}
	for i := range *small {
		r.Files = append(r.Files, hubtest.File{Path: fmt.Sprintf("extra/file-%03d.json", i), Size: int64(4<<10 + (i*7919)%(60<<10)), Seed: uint64(1000 + i)})
	}
	s := hubtest.New(hubtest.Options{RateLimit: *rate, SeparateCDN: *cdn})
	defer s.Close()
	m := manifest{URL: s.URL, Repo: *repo, Commit: s.AddRepo(r)}
	for _, f := range r.Files {
		m.Files = append(m.Files, file{Path: f.Path, Size: f.Size, LFS: f.Size >= r.LFSThreshold, ETag: s.ETag(*repo, f.Path)})
		m.Bytes += f.Size
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if *out == "" {
		fmt.Println(string(b))
	} else if err := writeAtomic(*out, b); err != nil {
		log.Fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}

// writeAtomic writes through a temp name, so a script polling for the
// manifest never reads half of it.
func writeAtomic(path string, b []byte) error {
	return atomicfile.Write(path, b, 0o644)
}
