package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/sparklane/sparklane/internal/cli"
	"github.com/sparklane/sparklane/internal/config"
	"github.com/sparklane/sparklane/internal/workers"
	// The embedded Temporal server: this program hosts the control service.
	_ "github.com/sparklane/sparklane/internal/workers/embedded"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: orchbench overhead --config CFG ID... | orchbench status --nodes N")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "overhead":
		err = overhead(os.Args[2:])
	case "timeline":
		err = timeline(os.Args[2:])
	case "status":
		err = status(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "orchbench:", err)
		os.Exit(1)
	}
}

type span struct{ a, b time.Time }

// events reads the whole history of a run (runID "" for the latest).
func events(ctx context.Context, c client.Client, id, runID string) ([]*history.HistoryEvent, error) {
	it := c.GetWorkflowHistory(ctx, id, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var evs []*history.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", id, err)
		}
		evs = append(evs, e)
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("%s has no history", id)
	}
	return evs, nil
}

// activitySpans collects [started, closed] of every activity of a run and,
// recursively, of its child workflows; it returns them and the run's wall span.
func activitySpans(ctx context.Context, c client.Client, id, runID string) ([]span, span, error) {
	evs, err := events(ctx, c, id, runID)
	if err != nil {
		return nil, span{}, err
	}
	wall := span{evs[0].GetEventTime().AsTime(), evs[len(evs)-1].GetEventTime().AsTime()}
	started := map[int64]time.Time{}
	var out []span
	for _, e := range evs {
		switch e.GetEventType() {
		case enums.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			started[e.GetActivityTaskStartedEventAttributes().GetScheduledEventId()] = e.GetEventTime().AsTime()
		case enums.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			if s, ok := started[e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()]; ok {
				out = append(out, span{s, e.GetEventTime().AsTime()})
			}
		case enums.EVENT_TYPE_ACTIVITY_TASK_FAILED:
			if s, ok := started[e.GetActivityTaskFailedEventAttributes().GetScheduledEventId()]; ok {
				out = append(out, span{s, e.GetEventTime().AsTime()})
			}
		case enums.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
			a := e.GetChildWorkflowExecutionStartedEventAttributes()
			child, _, err := activitySpans(ctx, c, a.GetWorkflowExecution().GetWorkflowId(), a.GetWorkflowExecution().GetRunId())
			if err != nil {
				return nil, span{}, err
			}
			out = append(out, child...)
		}
	}
	return out, wall, nil
}

func union(spans []span) time.Duration {
	sort.Slice(spans, func(i, j int) bool { return spans[i].a.Before(spans[j].a) })
	var total time.Duration
	var cur span
	for i, s := range spans {
		if i == 0 || s.a.After(cur.b) {
			if i > 0 {
				total += cur.b.Sub(cur.a)
			}
			cur = s
			continue
		}
		if s.b.After(cur.b) {
			cur.b = s.b
		}
	}
	if len(spans) > 0 {
		total += cur.b.Sub(cur.a)
	}
	return total
}

// connect parses "--config CFG ID..." and connects to that fleet's server.
func connect(ctx context.Context, name string, args []string) (*workers.Env, []string, error) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	cfgPath := fs.String("config", "", "fleet config")
	fs.Parse(args)
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return nil, nil, err
	}
	env, err := workers.Connect(ctx, cfg, zap.NewNop(), workers.ConnectOptions{NoUI: true})
	if err != nil {
		return nil, nil, err
	}
	return env, fs.Args(), nil
}

func overhead(args []string) error {
	ctx := context.Background()
	env, ids, err := connect(ctx, "overhead", args)
	if err != nil {
		return err
	}
	defer env.Close()
	for _, id := range ids {
		spans, wall, err := activitySpans(ctx, env.Client, id, "")
		if err != nil {
			return err
		}
		busy := union(spans)
		w := wall.b.Sub(wall.a)
		fmt.Printf("%-22s wall %6.2fs  in activities %6.2fs (%d activities)  orchestration overhead %5.2fs\n", id, w.Seconds(), busy.Seconds(), len(spans), (w - busy).Seconds())
	}
	return nil
}

func timeline(args []string) error {
	ctx := context.Background()
	env, ids, err := connect(ctx, "timeline", args)
	if err != nil {
		return err
	}
	defer env.Close()
	var start time.Time
	var walk func(id, runID, indent string) error
	walk = func(id, runID, indent string) error {
		evs, err := events(ctx, env.Client, id, runID)
		if err != nil {
			return err
		}
		for _, e := range evs {
			t := e.GetEventTime().AsTime()
			if start.IsZero() {
				start = t
			}
			what := e.GetEventType().String()
			if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
				what += " " + a.GetActivityType().GetName() + " on " + a.GetTaskQueue().GetName()
			}
			fmt.Printf("%8.1f ms %s%s %s\n", float64(t.Sub(start).Microseconds())/1000, indent, id, what)
			if c := e.GetChildWorkflowExecutionStartedEventAttributes(); c != nil {
				if err := walk(c.GetWorkflowExecution().GetWorkflowId(), c.GetWorkflowExecution().GetRunId(), indent+"  "); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, id := range ids {
		start = time.Time{}
		if err := walk(id, "", ""); err != nil {
			return err
		}
	}
	return nil
}

func status(args []string) error {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	n := fs.Int("nodes", 32, "local nodes in the fleet")
	fs.Parse(args)
	dir, err := os.MkdirTemp("", "orchbench-status-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var b strings.Builder
	fmt.Fprintf(&b, "state_dir = %q\nrecipes_dir = %q\n[temporal]\nport = 0\nui_port = -1\n", filepath.Join(dir, "state"), filepath.Join(dir, "recipes"))
	for i := 1; i <= *n; i++ {
		root := filepath.Join(dir, "nodes", fmt.Sprintf("node%02d", i))
		if err := os.MkdirAll(filepath.Join(root, "srv"), 0o755); err != nil {
			return err
		}
		fmt.Fprintf(&b, "[[nodes]]\nname = \"node%02d\"\nssh = \"\"\naddress = \"127.0.0.1\"\nroots = [\"/srv\"]\nfs_root = %q\n", i, root)
	}
	os.MkdirAll(filepath.Join(dir, "recipes"), 0o755)
	cfgFile := filepath.Join(dir, "sparklane.toml")
	if err := os.WriteFile(cfgFile, []byte(b.String()), 0o644); err != nil {
		return err
	}
	cfg, err := config.Load(cfgFile)
	if err != nil {
		return err
	}
	ctx := context.Background()
	t0 := time.Now()
	env, err := workers.Connect(ctx, cfg, zap.NewNop(), workers.ConnectOptions{NoUI: true, LocalWorkers: true})
	if err != nil {
		return err
	}
	defer env.Close()
	boot := time.Since(t0)
	// Point the CLI at the running server.
	b.WriteString("")
	text := strings.Replace(b.String(), "[temporal]\nport = 0\n", fmt.Sprintf("[temporal]\naddress = %q\n", env.Address), 1)
	if err := os.WriteFile(cfgFile, []byte(text), 0o644); err != nil {
		return err
	}
	for round := 1; round <= 3; round++ {
		var out, errb bytes.Buffer
		t1 := time.Now()
		code := cli.Execute(ctx, []string{"--config", cfgFile, "status", "--json"}, strings.NewReader(""), &out, &errb, nil)
		took := time.Since(t1)
		if code != 0 {
			return fmt.Errorf("status exit %d: %s", code, errb.String())
		}
		free := strings.Count(out.String(), `"state": "free"`)
		fmt.Printf("starter status, %d local nodes (%d free), round %d: %.2fs (server + %d workers started in %.2fs before)\n", *n, free, round, took.Seconds(), *n+1, boot.Seconds())
	}
	return nil
}
