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
