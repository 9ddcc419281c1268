package hubtest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// The listing modes: a mirror that ignores ?blobs=true, one that refuses
// it, and an HTML page where the JSON should be.
func TestListingModes(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	s.AddRepo(Repo{ID: "org/m", Files: []File{{Path: "config.json", Data: []byte(`{}`)}}})
	url := s.URL + "/api/models/org/m/revision/main"

	s.SetListing(ListingNoBlobs)
	resp, body := do(t, "GET", url+"?blobs=true", nil)
	if resp.StatusCode != 200 || bytes.Contains(body, []byte("blobId")) || !bytes.Contains(body, []byte(`"rfilename":"config.json"`)) {
		t.Fatalf("ListingNoBlobs: %d %s", resp.StatusCode, body)
	}
	s.SetListing(ListingRefuseBlobs)
	if resp, body := do(t, "GET", url+"?blobs=true", nil); resp.StatusCode != 400 || !bytes.Contains(body, []byte("blobs")) {
		t.Fatalf("ListingRefuseBlobs with the parameter: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, "GET", url, nil); resp.StatusCode != 200 || bytes.Contains(body, []byte("blobId")) {
		t.Fatalf("ListingRefuseBlobs without it: %d %s", resp.StatusCode, body)
	}
	s.SetListing(ListingHTML)
	if resp, body := do(t, "GET", url, nil); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !bytes.HasPrefix(body, []byte("<!DOCTYPE html>")) {
		t.Fatalf("ListingHTML: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	s.SetListing(ListingHub)
	if _, body := do(t, "GET", url+"?blobs=true", nil); !bytes.Contains(body, []byte("blobId")) {
		t.Fatalf("ListingHub: %s", body)
	}
}

// Hold sends a file's first n bytes and holds the response open until
// Release; a listing arriving meanwhile is counted; the hold trips once.
// WrongETag changes what /resolve announces, not the listing.
func TestHoldAndWrongETag(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	s.AddRepo(Repo{ID: "org/m", LFSThreshold: 1, Files: []File{{Path: "w.bin", Size: 1 << 20, Seed: 3}}})
	etag := s.ETag("org/m", "w.bin")
	held := s.Hold("org/m", "w.bin", 1000)
	resp, err := noRedirect.Get(s.URL + "/lfs/" + etag)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 1000)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatalf("the bytes before the hold: %v", err)
	}
	<-held.Reached()
	if s.Holding() != 1 {
		t.Fatalf("holding %d responses, want 1", s.Holding())
	}
	do(t, "GET", s.URL+"/api/models/org/m/revision/main", nil)
	if s.HeldOverlaps() != 1 {
		t.Fatalf("a listing during the hold counted %d times", s.HeldOverlaps())
	}
	held.Release()
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || len(rest) != 1<<20-1000 {
		t.Fatalf("after the release: %d bytes, %v", len(rest), err)
	}
	if _, b := do(t, "GET", s.URL+"/lfs/"+etag, nil); len(b) != 1<<20 {
		t.Fatalf("the hold tripped twice: %d bytes", len(b))
	}

	// A held response ends when its client goes away.
	held = s.Hold("org/m", "w.bin", 10)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/lfs/"+etag, nil)
	resp, err = noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	<-held.Reached()
	cancel()
	resp.Body.Close()

	s.WrongETag("org/m", "w.bin")
	resp, _ = do(t, "HEAD", s.URL+"/org/m/resolve/main/w.bin", nil)
	if got := resp.Header.Get("X-Linked-Etag"); got == strconv.Quote(etag) || len(got) != len(etag)+2 {
		t.Fatalf("WrongETag: X-Linked-Etag %s (the true one is %s)", got, etag)
	}
	if _, body := do(t, "GET", s.URL+"/api/models/org/m/revision/main?blobs=true", nil); !bytes.Contains(body, []byte(etag)) {
		t.Fatalf("WrongETag changed the listing: %s", body)
	}
}
