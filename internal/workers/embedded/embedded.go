// Package embedded links the embedded Temporal server (internal/devserver)
// into a program: importing it for its side effect lets workers.Connect
// and workers.RunDev start the server in-process. The control service
// (worker dev, which `starter control start` runs) and the end-to-end
// tests import it; the starter, only a client, does not.
package embedded

import (
	"context"

	"github.com/sparklane/sparklane/internal/devserver"
	"github.com/sparklane/sparklane/internal/workers"
)

func init() {
	workers.Embedded(func(ctx context.Context, o workers.EmbeddedOptions) (workers.EmbeddedServer, error) {
		srv, err := devserver.Start(ctx, devserver.Options{StateDir: o.StateDir, Port: o.Port, UIPort: o.UIPort, Namespace: o.Namespace, Logger: o.Logger})
		if err != nil {
			// A nil *Server in the interface would not compare nil.
			return nil, err
		}
		return srv, nil
	})
}
