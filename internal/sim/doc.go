// Package sim is engine-sim as a library: an OpenAI-compatible stand-in for
// SGLang/vLLM that really reads and checks the model tree it is given, joins
// its ranks over TCP and serves at configured token rates. The engine-sim
// binary is a thin main over ParseArgs and Run; tests run the same engine
// in-process.
//
// Phases, in order, like a real engine:
//
//   - load: resolve the model path (a directory of *.safetensors, or a hub
//     cache models--org--name/snapshots/REV via refs/main), parse every
//     header, read every tensor byte (at most LoadMiBps), and check the
//     engram files of this rank when an engram dir is set. A corrupt tree
//     is refused with one line naming the file.
//   - join: rank 0 listens on the dist-init address; ranks > 0 connect
//     (retrying until rank 0 is up), report when loaded and exchange
//     heartbeats. Rank 0 opens its API only after every rank has joined and
//     loaded; until then the API port refuses connections. A rank whose
//     connection drops makes rank 0 exit naming the rank; workers exit when
//     rank 0 goes away.
//   - serve: rank 0 answers /health, /v1/models, /v1/completions,
//     /v1/chat/completions (SSE streaming or not, with usage) and /metrics.
//
// Tokenization (documented so tests and tools can reason about it; the probe
// and bench always count tokens from usage): text is split on whitespace and
// each word counts ceil(len(word)/4) tokens (runes), at least one. Chat
// prompts count the concatenated message contents. Generated text is made of
// words of at most four letters, one token each, chosen deterministically
// from the prompt, or the answer to an integer arithmetic prompt.
//
// Tools: a chat request with tools is answered with one deterministic tool
// call (tool_choice none, auto, required or a named function; see
// pickToolCall), and the tool definitions count as prompt tokens.
//
// Timing: the first token comes prompt_tokens/PrefillTPS after the request,
// and nothing of a streamed answer (not even the role chunk) is sent before;
// token i (from 0) at first + i/DecodeTPS, on an absolute schedule so the
// measured rate matches the configured one.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package sim
