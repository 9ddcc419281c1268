package workflows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/sparklane/sparklane/activities"
	"github.com/sparklane/sparklane/internal/contract"
)

// wireTypes maps every name a history can carry a payload under to the
// contract types it must decode into: workflows (input, result),
// activities (input, result), signals and updates.
type wireTypes struct {
	workflows  map[string][2]reflect.Type
	activities map[string][2]reflect.Type
	signals    map[string]reflect.Type
	updates    map[string][2]reflect.Type
}

func newWireTypes(t *testing.T) wireTypes {
	w := wireTypes{workflows: map[string][2]reflect.Type{}, activities: map[string][2]reflect.Type{},
		signals: map[string]reflect.Type{contract.KeeperRankDiedSignal: reflect.TypeFor[contract.KeeperRankDied]()},
		updates: map[string][2]reflect.Type{contract.KeeperControlUpdate: {reflect.TypeFor[contract.KeeperControl](), reflect.TypeFor[contract.KeeperStatus]()}},
	}
	for _, wf := range replayed {
		ft := reflect.TypeOf(wf)
		name := runtime.FuncForPC(reflectPC(wf)).Name()
		name = name[strings.LastIndex(name, ".")+1:]
		var io [2]reflect.Type
		if ft.NumIn() > 1 {
			io[0] = ft.In(1)
		}
		if ft.NumOut() > 1 {
			io[1] = ft.Out(0)
		}
		w.workflows[name] = io
	}
	for _, s := range []any{&activities.NodeActivities{}, &activities.ControlActivities{}, &activities.FetchActivities{}, &activities.GatewayActivities{}} {
		st := reflect.TypeOf(s)
		for i := range st.NumMethod() {
			m := st.Method(i)
			switch {
			case m.Type.NumIn() != 3:
			case m.Type.NumOut() == 2:
				w.activities[m.Name] = [2]reflect.Type{m.Type.In(2), m.Type.Out(0)}
			case m.Type.NumOut() == 1:
				w.activities[m.Name] = [2]reflect.Type{m.Type.In(2), nil}
			}
		}
	}
	if len(w.activities) < 30 {
		t.Fatalf("only %d activities found: the reflection is wrong", len(w.activities))
	}
	return w
}

// decodeStrict decodes p into a new value of typ, refusing any field the
// type does not know: a field a history holds that the current type lost
// (a rename, a removal) fails here.
func decodeStrict(p *commonpb.Payload, typ reflect.Type) error {
	if p == nil || typ == nil {
		return nil
	}
	if string(p.GetMetadata()["encoding"]) != "json/plain" {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(p.GetData()))
	d.DisallowUnknownFields()
	v := reflect.New(typ)
	if err := d.Decode(v.Interface()); err != nil {
		return fmt.Errorf("as %s: %w\n%s", typ, err, p.GetData())
	}
	return nil
}

func first(ps *commonpb.Payloads) *commonpb.Payload {
	if len(ps.GetPayloads()) == 0 {
		return nil
	}
	return ps.GetPayloads()[0]
}

// Every payload of every committed history decodes into today's contract
// type for it with no field left over: the replay test proves the command
// sequence did not move, this one that no wire field was renamed or lost
// (replay alone decodes a renamed field as zero and goes on).
func TestHistoriesDecodeIntoTheContract(t *testing.T) {
	w := newWireTypes(t)
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no histories: %v", err)
	}
	checked := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		h, err := client.HistoryFromJSON(fh, client.HistoryJSONOptions{})
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		n, errs := w.check(h.GetEvents())
		checked += n
		for _, e := range errs {
			t.Errorf("%s: %v", filepath.Base(f), e)
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d payloads checked: the event walk is wrong", checked)
	}
}

// check decodes every payload of one history's events; it returns how
// many it checked and what failed.
func (w wireTypes) check(events []*historypb.HistoryEvent) (int, []error) {
	c := &historyCheck{w: w, activityOf: map[int64]string{}, childOf: map[int64]string{}}
	for _, e := range events {
		if !c.runEvent(e) {
			c.messageEvent(e)
		}
	}
	return c.n, c.errs
}

// historyCheck is one history's walk: the activity (or update) and child
// each scheduling event ID names, the workflow's type, what failed and
// how many payloads were checked.
type historyCheck struct {
	w                   wireTypes
	activityOf, childOf map[int64]string
	wfType              string
	errs                []error
	n                   int
}

// try decodes payload p (what) strictly into typ.
func (c *historyCheck) try(what string, p *commonpb.Payload, typ reflect.Type) {
	if p == nil || string(p.GetMetadata()["encoding"]) == "binary/null" {
		return
	}
	if typ == nil {
		c.errs = append(c.errs, fmt.Errorf("%s: no contract type known for it", what))
		return
	}
	c.n++
	if err := decodeStrict(p, typ); err != nil {
		c.errs = append(c.errs, fmt.Errorf("%s: %w", what, err))
	}
}

// runEvent checks the payloads of a workflow's, an activity's or a
// child's start or completion; false: e is none of those.
func (c *historyCheck) runEvent(e *historypb.HistoryEvent) bool {
	id, w := e.GetEventId(), c.w
	switch {
	case e.GetWorkflowExecutionStartedEventAttributes() != nil:
		a := e.GetWorkflowExecutionStartedEventAttributes()
		c.wfType = a.GetWorkflowType().GetName()
		c.try("input of "+c.wfType, first(a.GetInput()), w.workflows[c.wfType][0])
	case e.GetWorkflowExecutionCompletedEventAttributes() != nil:
		c.try("result of "+c.wfType, first(e.GetWorkflowExecutionCompletedEventAttributes().GetResult()), w.workflows[c.wfType][1])
	case e.GetActivityTaskScheduledEventAttributes() != nil:
		a := e.GetActivityTaskScheduledEventAttributes()
		c.activityOf[id] = a.GetActivityType().GetName()
		c.try("input of activity "+c.activityOf[id], first(a.GetInput()), w.activities[c.activityOf[id]][0])
	case e.GetActivityTaskCompletedEventAttributes() != nil:
		a := e.GetActivityTaskCompletedEventAttributes()
		name := c.activityOf[a.GetScheduledEventId()]
		c.try("result of activity "+name, first(a.GetResult()), w.activities[name][1])
	case e.GetStartChildWorkflowExecutionInitiatedEventAttributes() != nil:
		a := e.GetStartChildWorkflowExecutionInitiatedEventAttributes()
		c.childOf[id] = a.GetWorkflowType().GetName()
		c.try("input of child "+c.childOf[id], first(a.GetInput()), w.workflows[c.childOf[id]][0])
	case e.GetChildWorkflowExecutionCompletedEventAttributes() != nil:
		a := e.GetChildWorkflowExecutionCompletedEventAttributes()
		name := c.childOf[a.GetInitiatedEventId()]
		c.try("result of child "+name, first(a.GetResult()), w.workflows[name][1])
	default:
		return false
	}
	return true
}

// messageEvent checks the payloads of a signal, an update or a local
// activity's marker.
func (c *historyCheck) messageEvent(e *historypb.HistoryEvent) {
	id, w := e.GetEventId(), c.w
	switch {
	case e.GetWorkflowExecutionSignaledEventAttributes() != nil:
		a := e.GetWorkflowExecutionSignaledEventAttributes()
		c.try("signal "+a.GetSignalName(), first(a.GetInput()), w.signals[a.GetSignalName()])
	case e.GetSignalExternalWorkflowExecutionInitiatedEventAttributes() != nil:
		a := e.GetSignalExternalWorkflowExecutionInitiatedEventAttributes()
		c.try("signal "+a.GetSignalName(), first(a.GetInput()), w.signals[a.GetSignalName()])
	case e.GetWorkflowExecutionUpdateAcceptedEventAttributes() != nil:
		in := e.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput()
		c.try("update "+in.GetName(), first(in.GetArgs()), w.updates[in.GetName()][0])
		c.activityOf[id] = in.GetName()
	case e.GetWorkflowExecutionUpdateCompletedEventAttributes() != nil:
		a := e.GetWorkflowExecutionUpdateCompletedEventAttributes()
		name := c.activityOf[a.GetAcceptedEventId()]
		c.try("update result "+name, first(a.GetOutcome().GetSuccess()), w.updates[name][1])
	case e.GetMarkerRecordedEventAttributes().GetMarkerName() == "LocalActivity":
		d := e.GetMarkerRecordedEventAttributes().GetDetails()
		var meta struct{ ActivityType string }
		if err := json.Unmarshal(first(d["data"]).GetData(), &meta); err != nil {
			c.errs = append(c.errs, fmt.Errorf("local activity marker: %w", err))
			return
		}
		c.try("result of local activity "+meta.ActivityType, first(d["result"]), w.activities[meta.ActivityType][1])
	}
}
