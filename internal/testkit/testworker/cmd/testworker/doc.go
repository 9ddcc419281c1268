// Command testworker is the worker command line (workers.Execute: control,
// node --node NAME, dev) with the fault points of the process-level tests,
// armed from its environment (testworker.FromEnv). The tests that kill,
// pause or reboot a worker running in its own process build and run this
// program instead of ./worker, which has no such variables.
package main
