// Command engine-sim is the OpenAI-compatible stand-in for SGLang/vLLM used
// by the demo and the tests (no GPUs here). It takes the engines' flags,
// really reads and checks the model tree, joins its ranks and serves at
// configured token rates. All behaviour lives in internal/sim.
//
// A main over internal/sim; it must not import go.temporal.io or any staging
// engine.
package main
