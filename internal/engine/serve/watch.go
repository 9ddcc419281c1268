package serve

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/sparklane/sparklane/internal/contract"
)

// EventSource is the part of the Docker API that streams events.
type EventSource interface {
	Events(ctx context.Context, options events.ListOptions) (<-chan events.Message, <-chan error)
}

// RankDeath is one rank container of a lane that died on a node.
type RankDeath struct {
	Lane, Node, Container string
	Rank                  int
	ExitCode              string
}

// WatchRankDeaths calls died for each rank container of node that dies
// (Docker's "die" event: exited, killed, OOM), until ctx ends. It blocks
// on Docker's event stream — no polling; a broken stream (a Docker
// restart) is reopened after retry. The keeper uses it to check a lane at
// once instead of at its next interval. Deaths from since on are told.
func WatchRankDeaths(ctx context.Context, d EventSource, node string, since time.Time, retry time.Duration, died func(RankDeath)) {
	f := filters.NewArgs(filters.Arg("type", string(events.ContainerEventType)), filters.Arg("event", string(events.ActionDie)),
		filters.Arg("label", contract.LabelNode+"="+node), filters.Arg("label", contract.LabelLane))
	for ctx.Err() == nil {
		// From since: what died while the stream was not open yet (or
		// broken) is still told.
		msgs, errs := d.Events(ctx, events.ListOptions{Filters: f, Since: fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond())})
	stream:
		for {
			select {
			case <-ctx.Done():
				return
			case <-errs:
				since = time.Now()
				break stream
			case m := <-msgs:
				a := m.Actor.Attributes
				rank, err := strconv.Atoi(a[contract.LabelRank])
				if err != nil || a[contract.LabelLane] == "" {
					continue
				}
				died(RankDeath{Lane: a[contract.LabelLane], Node: node, Container: a["name"], Rank: rank, ExitCode: a["exitCode"]})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}
