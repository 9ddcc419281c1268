// Command hello is the test image's only program: an HTTP server that
// answers "hello from ADDR", built static so the image is FROM scratch
// (no registry is reachable from the test machine).
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	flag.Parse()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", *addr)
	})
	log.Fatal(http.ListenAndServe(*addr, nil))
}
