// Package hubtest is a test double of the public Hugging Face Hub's HTTP
// API: an httptest server on 127.0.0.1 serving model repos defined in
// memory, so the download engine (internal/engine/hubfetch) is tested against
// real HTTP on loopback, and benchmarked, without the network.
//
// It is written from the Hub's documented behaviour (huggingface_hub's
// hf_api.py, file_download.py, utils/_http.py and constants.py), not from
// any client of this project:
//
//   - GET /api/models/{repo}/revision/{rev} answers {"id", "sha",
//     "siblings": [{"rfilename"}]}; with ?blobs=true each sibling also
//     carries "size", "blobId" (the git blob sha1) and, for LFS files,
//     "lfs": {"sha256", "size", "pointerSize"}. The revision is
//     path-escaped as one segment (refs%2Fpr%2F1).
//   - HEAD and GET /{repo}/resolve/{rev}/{path} answer with X-Repo-Commit
//     and ETag; a git-stored file is served right there (Range supported),
//     an LFS file is a 302 whose headers also carry X-Linked-Etag (its
//     sha256) and X-Linked-Size, and whose Location is a relative path to
//     a separate blob route serving the bytes with Range support (or, with
//     Options.SeparateCDN, an absolute URL on a second server, as the
//     public Hub redirects to its CDN).
//   - Errors carry X-Error-Code (RepoNotFound, RevisionNotFound,
//     EntryNotFound, GatedRepo), X-Error-Message and a JSON {"error"}
//     body. A repo may require a token: 401 without one (or with a wrong
//     one), 403 GatedRepo with a token the gated repo has not granted.
//
// For tests to assert on, it counts the content bytes served per file
// and keeps a request log (the Authorization value is never logged, only
// whether one was sent). Hooks corrupt a served byte, cut a file's
// responses after N bytes (a dropped connection or a killed worker at a
// chosen point, deterministic, no sleeps), hold a response open after N
// bytes until released or until its client goes away (a stalled link;
// listings arriving meanwhile are counted: a second fetch attempt beside
// a stalled one), make /resolve announce a wrong etag, and fail the next
// requests with a status. SetListing makes the revision listing answer as
// mirrors and proxies do: ignoring ?blobs=true, refusing it with a 400,
// or an HTML page. Options.RateLimit caps each connection's bytes per
// second (for the benchmark).
//
// Content is either given (File.Data) or generated from a seed
// (File.Size, File.Seed), so a bench repo of several GiB costs no memory.
//
// It must not import production packages of sparklane (it is a double of
// an outside service, and internal/testkit is never imported by production
// code), and nothing of Temporal.
package hubtest
