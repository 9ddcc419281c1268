// Package gateway is the lanes' one client-facing address (`worker
// gateway`): an OpenAI-compatible reverse proxy that routes each request by
// its `model` to the head of the cluster whose current lane serves that
// name, with the route table the workflows own.
//
// It owns:
//
//   - the route table (one contract.GatewayRoute per cluster): changed only
//     through Hold, Route, Release, Drain, Unroute, Off and Reconcile (the
//     gateway's activities call them), each change written atomically to
//     the state file before the call returns, so a gateway killed and
//     started again routes from the same table while the control service
//     is away;
//   - routing: /v1/chat/completions, /v1/completions, /v1/embeddings and
//     every other /v1/* path go to the route of the request's `model` (a
//     lane's served name or one of its recipe's [gateway] aliases; a request
//     by alias is forwarded with `model` rewritten to the served name);
//     /v1/models is answered here. A name two clusters claim goes to the
//     route set last (Route, Reconcile). A request without a model goes to
//     the one routed cluster, or gets 400 when there are several;
//   - holding: a held or draining route's requests wait (all wake on each
//     change of the table) until Release, bounded by hold_timeout and
//     max_held (per cluster); past either, 503 with Retry-After (the route's
//     ETA, in whole seconds, at least 1). An off cluster answers 503, or with
//     [gateway] wake calls Options.Wake and holds;
//   - a head that refuses the connection (nothing sent) holds the request
//     as a held one (refused.go) until the engine listens again or the
//     table changes, within hold_timeout and max_held;
//   - draining: a lane's requests in flight (streams included) are counted,
//     waited for up to drain_timeout, and cut off past it;
//   - streaming without buffering (a flush per upstream write), request
//     bodies bounded by max_body (413), upstream errors in OpenAI's error
//     shape naming the lane (never a node address) — a stream whose
//     engine goes away mid-answer ends with such an error as its last
//     event;
//   - API keys (sha256 hashes from api_keys_file, optional per-key model
//     names): 401, 403, and no key or hash in any log, metric or error;
//   - its Prometheus metrics (sparklane_gateway_*), present from the first
//     scrape for every cluster it knows;
//   - Steps, the table as the workflows' steps change it: by cluster, by
//     lane (a stop) or by nodes (a power-off); a hold's ETA is the next
//     lane's last ready time (kept in the state file); a down route (a crash
//     loop, a failed rollback) answers 503 at once and is never woken; the
//     state file also carries the held counts, refreshed every second while
//     they change (what `starter gateway routes` and status show).
//
// It may import internal/contract, internal/config, internal/atomicfile,
// zap and the Prometheus client. It must not import activities, workflows,
// workers, the Temporal SDK or any engine (internal/engine/...): the
// activities wrap it, and the process (`worker gateway`) builds it.
package gateway
