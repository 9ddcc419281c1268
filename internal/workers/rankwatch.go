package workers

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/node"
)

// rankWatch tells the keepers of a node's clusters when one of the node's
// rank containers dies (Docker's event stream, no polling), so a keeper
// checks its lane at once instead of at its next interval.
type rankWatch struct {
	c      client.Client
	cfg    *config.Config
	node   config.Node
	log    *zap.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

// rankWatchRetry is the wait before a broken event stream is reopened.
const rankWatchRetry = 5 * time.Second

func (r *rankWatch) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	since := time.Now()
	go func() {
		defer close(r.done)
		d, err := node.DockerClient(ctx, r.node.Docker, nil)
		if err != nil {
			r.log.Warn("not watching rank containers: keepers notice a dead rank at their next check", zap.Error(err))
			return
		}
		defer d.Close()
		serve.WatchRankDeaths(ctx, d, r.node.Name, since, rankWatchRetry, func(x serve.RankDeath) { r.tell(ctx, x) })
	}()
}

func (r *rankWatch) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
}

// tell signals the keeper of every cluster holding the node; a cluster
// without a running keeper is skipped.
func (r *rankWatch) tell(ctx context.Context, x serve.RankDeath) {
	sig := contract.KeeperRankDied{Lane: x.Lane, Node: x.Node, Container: x.Container, Rank: x.Rank, ExitCode: x.ExitCode}
	for _, c := range r.cfg.Clusters {
		if !slices.Contains(c.Nodes, r.node.Name) {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.c.SignalWorkflow(sctx, contract.KeeperID(c.Name), "", contract.KeeperRankDiedSignal, sig)
		cancel()
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) && ctx.Err() == nil {
			r.log.Warn("tell the keeper a rank died", zap.String("keeper", contract.KeeperID(c.Name)), zap.String("container", x.Container), zap.Error(err))
		}
	}
}
