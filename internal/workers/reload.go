package workers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/control"
)

// ErrReload ends the control service so that it starts again on the fleet
// config that changed under it (Execute execs the same program with the
// same arguments: same pid, so a supervisor sees no exit).
var ErrReload = errors.New("the fleet config changed: reloading")

// configCheckEvery is how often the control service looks whether its
// fleet config file changed.
const configCheckEvery = 2 * time.Second

// openRuns lists the runs under way that a reload would interrupt (their
// workflow IDs): every open run but the keepers and node leases, which
// carry on across a restart of the control service unharmed.
type openRuns func(ctx context.Context) ([]string, error)

// configWatch is the control service's watch on its fleet config: when
// the file's content changes and it loads, the service reloads once no run
// is under way; until then it says which runs it waits for, and a file
// that does not load is reported and changes nothing.
type configWatch struct {
	file   string
	loaded string // the hash of the content the service runs on
	runs   openRuns
	log    *zap.Logger
	// said is what was last reported, so each state is said once.
	said string
}

// check looks at the file once and reports whether the service should
// reload now.
func (w *configWatch) check(ctx context.Context) bool {
	h := control.HashFile(w.file)
	if h == "" || h == w.loaded {
		return false
	}
	if _, err := config.Load(w.file); err != nil {
		w.say("bad:"+h, "the fleet config changed but does not load: the control service keeps the one it runs on; fix the file", zap.Error(err))
		return false
	}
	runs, err := w.runs(ctx)
	if err != nil {
		w.say("list:"+h, "the fleet config changed; the control service cannot tell which runs are under way, so it reloads when it can", zap.Error(err))
		return false
	}
	if len(runs) > 0 {
		w.say("wait:"+h+strings.Join(runs, ","), "the fleet config changed: the control service reloads it once these runs end", zap.Strings("runs", runs))
		return false
	}
	w.log.Info("the fleet config changed: reloading the control service on it (no run under way)", zap.String("file", w.file))
	return true
}

// say logs msg once for the state key.
func (w *configWatch) say(key, msg string, f ...zap.Field) {
	if w.said == key {
		return
	}
	w.said = key
	w.log.Warn(msg, append(f, zap.String("file", w.file))...)
}

// watch checks every configCheckEvery until ctx ends or a reload is due,
// and calls reload then.
func (w *configWatch) watch(ctx context.Context, reload func()) {
	t := time.NewTicker(configCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.check(ctx) {
				reload()
				return
			}
		}
	}
}

// runsUnderWay lists the open runs of c but keepers and node leases.
func runsUnderWay(c client.Client, namespace string) openRuns {
	return func(ctx context.Context) ([]string, error) {
		if namespace == "" {
			namespace = config.DefaultNamespace
		}
		var out []string
		var token []byte
		for {
			qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			resp, err := c.ListOpenWorkflow(qctx, &workflowservice.ListOpenWorkflowExecutionsRequest{Namespace: namespace, MaximumPageSize: 200, NextPageToken: token})
			cancel()
			if err != nil {
				return nil, fmt.Errorf("list the runs under way: %w", err)
			}
			for _, e := range resp.GetExecutions() {
				if t := e.GetType().GetName(); t != contract.WorkflowKeeper && t != contract.WorkflowNodeLease {
					out = append(out, e.GetExecution().GetWorkflowId())
				}
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
		slices.Sort(out)
		return out, nil
	}
}
