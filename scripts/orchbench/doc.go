// Command orchbench measures sparklane's orchestration overhead:
//
//	orchbench overhead --config CFG ID...   wall time of each workflow run minus the time
//	                                        during which at least one activity (its own or
//	                                        its children's) was executing
//	orchbench timeline --config CFG ID      every event of the run and its children's, as
//	                                        milliseconds from the run's start
//	orchbench status --nodes 32             `starter status` on a fleet of N local nodes
//
// Used by scripts/bench-orchestration.sh.
//
// A benchmark main: it measures the product path's own cost against the
// engine alone.
package main
