// Command sparserows-bench drives scripts/bench-sparserows.sh: it generates
// a large synthetic checkpoint, prints the rank's byte ranges for the dd
// peer, and times Stage (pack) and Verify on it. It is a benchmark helper,
// not part of the product.
//
// A benchmark main: it calls the engine directly, without Temporal.
package main
