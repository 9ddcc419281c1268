package serve_test

import (
	"context"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/serve"
)

// A rank container of the watched node that dies is reported from
// Docker's event stream (lane, node, rank, exit code); another node's
// rank that dies is not.
func TestWatchRankDeaths(t *testing.T) {
	d, img, lane := dockerLane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	deaths := make(chan serve.RankDeath, 4)
	watching := make(chan struct{})
	since := time.Now() // deaths from here on are told, the stream open or not yet
	go func() {
		defer close(watching)
		serve.WatchRankDeaths(ctx, d, "watch-n1", since, time.Second, func(x serve.RankDeath) { deaths <- x })
	}()
	// The other node's rank dies first, then ours.
	for _, s := range []serve.RankSpec{spec(lane, "watch-n2", 1, "h", img, "exit:5"), spec(lane, "watch-n1", 0, "h", img, "exit:3")} {
		if _, err := serve.StartRank(ctx, d, s); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case x := <-deaths:
		if x.Lane != lane || x.Node != "watch-n1" || x.Rank != 0 || x.ExitCode != "3" {
			t.Errorf("death %+v, want lane %s node watch-n1 rank 0 exit 3", x, lane)
		}
	case <-ctx.Done():
		t.Fatal("no death reported")
	}
	cancel()
	<-watching
	select {
	case x := <-deaths:
		t.Errorf("another death reported: %+v", x)
	default:
	}
}
