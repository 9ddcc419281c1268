package power_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sparklane/sparklane/internal/engine/power"
	"github.com/sparklane/sparklane/internal/fault"
	"github.com/sparklane/sparklane/internal/testkit/hatest"
)

func TestHARelayRoundTrip(t *testing.T) {
	ha := hatest.Start(t, leakToken)
	ha.AddSwitch("switch.dgx1_outlet", "off")
	c := power.NewHA(ha.URL, power.NewSecret(leakToken, "token_env HA_TOKEN"), nil)
	ctx := context.Background()

	if err := c.TurnOn(ctx, "switch.dgx1_outlet"); err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx, "switch.dgx1_outlet"); err != nil || st != "on" {
		t.Fatalf("after turn_on: %q %v", st, err)
	}
	if err := c.TurnOff(ctx, "switch.dgx1_outlet"); err != nil {
		t.Fatal(err)
	}
	if st, err := c.State(ctx, "switch.dgx1_outlet"); err != nil || st != "off" {
		t.Fatalf("after turn_off: %q %v", st, err)
	}
	want := []string{"turn_on switch.dgx1_outlet", "turn_off switch.dgx1_outlet"}
	if got := ha.ServiceCalls(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("service calls %v, want %v", got, want)
	}
	for _, call := range ha.Calls() {
		if !call.Authorized {
			t.Fatalf("call without the bearer token: %+v", call)
		}
	}
}

func TestHAWrongTokenIsClearAndSecret(t *testing.T) {
	ha := hatest.Start(t, "the-right-token")
	ha.AddSwitch("switch.a", "on")
	c := power.NewHA(ha.URL, power.NewSecret(leakToken, "token_env HA_TOKEN"), nil)
	ctx := context.Background()
	_, errState := c.State(ctx, "switch.a")
	errOff := c.TurnOff(ctx, "switch.a")
	for _, err := range []error{errState, errOff} {
		if err == nil {
			t.Fatal("wrong token accepted")
		}
		msg := err.Error()
		for _, want := range []string{"Home Assistant at " + ha.URL, "refused the token from token_env HA_TOKEN", "(401)", "check the token"} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q lacks %q", msg, want)
			}
		}
		if strings.Contains(fmt.Sprintf("%+v %#v", err, err), leakToken) {
			t.Fatalf("error leaks the token: %v", err)
		}
		if typ, _ := fault.TypeOf(err); typ != fault.AuthFailed {
			t.Errorf("want AuthFailed, got %q", typ)
		}
	}
	if ha.State("switch.a") != "on" {
		t.Fatal("unauthorized turn_off switched the relay")
	}
}

func TestHAUnknownEntityNamed(t *testing.T) {
	ha := hatest.Start(t, leakToken)
	c := power.NewHA(ha.URL, power.NewSecret(leakToken, "token_file /etc/ha"), nil)
	_, err := c.State(context.Background(), "switch.ghost")
	if err == nil || !strings.Contains(err.Error(), "no entity switch.ghost") {
		t.Fatalf("want error naming switch.ghost, got %v", err)
	}
	if typ, _ := fault.TypeOf(err); typ != fault.InvalidSpec {
		t.Fatalf("want InvalidSpec, got %q", typ)
	}
	if err := c.TurnOn(context.Background(), "switch.ghost"); err == nil || !strings.Contains(err.Error(), "switch.ghost") {
		t.Fatalf("turn_on unknown: %v", err)
	}
	if err := c.TurnOn(context.Background(), "../api/x"); err == nil || !strings.Contains(err.Error(), "not a Home Assistant entity id") {
		t.Fatalf("bad entity id: %v", err)
	}
}

func TestHASetRelayPollsUntilConfirmed(t *testing.T) {
	ha := hatest.Start(t, leakToken)
	ha.AddSwitch("switch.b", "on")
	ha.SetLag("switch.b", 3)
	c := power.NewHA(ha.URL, power.NewSecret(leakToken, "token_env HA_TOKEN"), nil)
	res, err := c.SetRelay(context.Background(), power.SetRelayInput{Entity: "switch.b", Bound: 5 * time.Second, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != "off" || res.Polls != 4 {
		t.Fatalf("want off after 4 reads (lag 3), got %+v", res)
	}

	// A relay that never reports the new state: bounded, clear error.
	ha.AddSwitch("switch.stuck", "on")
	ha.SetLag("switch.stuck", 1_000_000)
	_, err = c.SetRelay(context.Background(), power.SetRelayInput{Entity: "switch.stuck", Bound: 100 * time.Millisecond, Interval: 20 * time.Millisecond})
	if !errors.Is(err, power.ErrRelayNotConfirmed) || !strings.Contains(err.Error(), "switch.stuck as on") {
		t.Fatalf("want ErrRelayNotConfirmed naming the entity, got %v", err)
	}
}

func TestHAErrorBodyScrubbed(t *testing.T) {
	ha := hatest.Start(t, leakToken)
	ha.EchoAuthOnError = true
	ha.AddSwitch("switch.c", "on")
	ha.FailService("switch.c", 500)
	c := power.NewHA(ha.URL, power.NewSecret(leakToken, "token_env HA_TOKEN"), nil)
	err := c.TurnOff(context.Background(), "switch.c")
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "Bearer ***") {
		t.Fatalf("want 500 error quoting the scrubbed body, got %v", err)
	}
	if strings.Contains(err.Error(), leakToken) {
		t.Fatalf("error leaks the token: %v", err)
	}
	if _, perm := fault.TypeOf(err); perm {
		t.Fatal("a 500 is transient, not permanent")
	}
	b, _ := json.Marshal(map[string]string{"err": err.Error()})
	if strings.Contains(string(b), leakToken) {
		t.Fatal("leak in JSON")
	}
}
