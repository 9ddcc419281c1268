// Package hatest is a Home Assistant REST test double: an httptest server
// on 127.0.0.1 that implements the three calls power uses (bearer auth,
// POST /api/services/DOMAIN/turn_on|turn_off, GET /api/states/ENTITY),
// records every call, and can simulate the failures that matter — a relay
// slow to report its new state, a failing integration, and a powered device
// that ignores (or bounces back from) its API shutdown. There is no Home
// Assistant here, so this double stands in for one.
//
// Test kit (a test double of Home Assistant's REST API): production code must
// not import it.
package hatest
