// Package power switches nodes and network gear on and off: a graceful
// shutdown (SSH command or RouterOS API call), a wait until the device is
// unreachable, then the Home Assistant outlet relay off; on is relay on or
// Wake-on-LAN, then a wait until the device answers again. The lesson that
// shaped it: a switch shut down through its API alone stayed powered and
// booted back, so off always ends with the relay off and on starts with it.
// The package knows nothing of Temporal.
//
// # Steps (one activity each)
//
// Every step is an Engine method with one struct in and one struct out, so
// the integrator wraps each as its own activity with its own retry policy:
//
//	Shutdown(ShutdownInput) ShutdownResult          graceful; dropped session = success
//	WaitUnreachable(WaitInput) WaitResult            two misses in a row, bounded
//	RelayOff(RelayInput) RelayResult                 turn_off + poll state until "off"
//	RelayOn(RelayInput) RelayResult                  turn_on + poll state until "on"
//	Wake(WakeInput) WakeResult                       Wake-on-LAN magic packet
//	WaitReachable(WaitInput) WaitResult              SSH answers (+ Engine.Polling)
//
// Off runs Shutdown → WaitUnreachable → RelayOff and ends in state "off"; a
// RelayOff error after a good shutdown is a warning (OffResult.Warnings),
// not an error, and a WaitUnreachable bound error stops the sequence with
// the relay untouched unless OffInput.Force. On runs RelayOn and/or Wake →
// WaitReachable and ends in state "free". Engine.Off and Engine.On are the
// in-process reference of these rules; workflows apply the same rules step
// by step. Permanent failures (bad spec, refused token, unknown entity) are
// classified with internal/fault; everything else is transient.
//
// Inputs and results carry names (token_env, password_env, entity ids),
// never credentials: the token is loaded inside the step (LoadToken) and
// held in a Secret, which prints as "***" everywhere.
//
// It is an engine: it must not import go.temporal.io, activities, workflows,
// internal/cli or internal/workers (activities wrap it; it knows nothing of
// Temporal).
package power
