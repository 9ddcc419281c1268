package activities

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"
	"go.temporal.io/sdk/temporal"

	"github.com/sparklane/sparklane/internal/contract"
	"github.com/sparklane/sparklane/internal/engine/disk"
	"github.com/sparklane/sparklane/internal/engine/images"
	"github.com/sparklane/sparklane/internal/engine/probe"
	"github.com/sparklane/sparklane/internal/engine/serve"
	"github.com/sparklane/sparklane/internal/engine/staging"
)

// fill sets every exported field of v (recursively) to a value that is
// not its zero, so a field a converter forgets shows in the JSON.
func fill(v reflect.Value, seed *int) {
	*seed++
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + string(rune('a'+*seed%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(time.Second) * int64(*seed))
			return
		}
		v.SetInt(int64(*seed))
	case reflect.Float64:
		v.SetFloat(float64(*seed) + 0.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), seed)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), seed)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, seed)
		fill(e, seed)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, *seed%60, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), seed)
			}
		}
	}
}

func filled[T any]() T {
	var v T
	seed := 0
	fill(reflect.ValueOf(&v).Elem(), &seed)
	return v
}

// sameJSON fails when a and b do not encode alike.
func sameJSON(t *testing.T, what string, a, b any) {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(ja) != string(jb) {
		t.Errorf("%s: the engine's and the contract's JSON differ:\nengine   %s\ncontract %s", what, ja, jb)
	}
}

// Every converter keeps every field: an engine value with all its fields
// set encodes exactly as its contract twin, and the inputs that go back to
// an engine come back whole. A field added on one side and not the other
// fails here (or does not compile, for the flat types).
func TestConvertersKeepEveryField(t *testing.T) {
	r := filled[staging.Result]()
	sameJSON(t, "staging.Result", r, blockResult(r))
	v := filled[staging.VerifyResult]()
	sameJSON(t, "staging.VerifyResult", v, blockVerify(v))
	p := filled[staging.Progress]()
	sameJSON(t, "staging.Progress", p, stageProgress(p))
	if back := engineProgress(stageProgress(p)); !reflect.DeepEqual(back, p) {
		t.Errorf("staging.Progress round trip: %+v, want %+v", back, p)
	}
	root := filled[disk.Root]()
	sameJSON(t, "disk.Root", root, diskRoot(root))
	pr := filled[disk.PruneResult]()
	sameJSON(t, "disk.PruneResult", pr, pruneResult(pr))
	b := filled[contract.DiskBlock]()
	sameJSON(t, "disk.Block", engineBlock(b), b)
	ps := filled[contract.PruneSpec]()
	sameJSON(t, "disk.PruneSpec", disk.PruneSpec(ps), ps)
	ip := filled[images.ImagePrune]()
	sameJSON(t, "images.ImagePrune", ip, imagePrune(ip))
	inv := filled[images.Inventory]()
	sameJSON(t, "images.Inventory", inv, imageInventory(inv))
	m := filled[images.Moved]()
	sameJSON(t, "images.Moved", m, imageMoved(m))
	pu := filled[images.Pulled]()
	sameJSON(t, "images.Pulled", pu, imagePulled(pu))
	sp := filled[contract.ImageSpec]()
	sameJSON(t, "images.Spec", engineSpec(sp), sp)
	f := filled[serve.Foreign]()
	sameJSON(t, "serve.Foreign", f, foreign(f))
	c := filled[serve.Cleared]()
	sameJSON(t, "serve.Cleared", c, cleared(c))
	pool := filled[probe.PoolResult]()
	sameJSON(t, "probe.PoolResult", pool, poolProbe(pool))
}

// A Docker client that cannot reach its daemon is DockerUnreachable (the
// image step waits for it), not a plain transient failure.
func TestClassifyDockerUnreachable(t *testing.T) {
	c, err := dockerclient.NewClientWithOpts(dockerclient.WithHost("unix://"+t.TempDir()+"/no-docker.sock"), dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ImageInspect(context.Background(), "x")
	var app *temporal.ApplicationError
	if !errors.As(classify(err), &app) || app.Type() != contract.DockerUnreachable || app.NonRetryable() {
		t.Fatalf("classify(%v) = %v, want a retryable DockerUnreachable", err, classify(err))
	}
}
