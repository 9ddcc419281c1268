package contract

import (
	"encoding/json"
	"testing"
	"time"
)

// Durations marshal as short human strings and read back both forms: the
// string, and the nanosecond numbers histories recorded before hold.
func TestDurationJSONHumanStringAndOldNanoseconds(t *testing.T) {
	type in struct {
		Pickup Duration `json:"pickup,omitempty"`
		Budget Duration `json:"budget"`
	}
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{2 * time.Second, `"2s"`}, {30 * time.Minute, `"30m"`}, {time.Hour, `"1h"`}, {90 * time.Minute, `"1h30m"`}, {1500 * time.Millisecond, `"1.5s"`}, {0, `"0s"`}} {
		b, err := json.Marshal(Duration(c.d))
		if err != nil || string(b) != c.want {
			t.Errorf("%s marshals to %s (%v), want %s", c.d, b, err, c.want)
		}
		var back Duration
		if err := json.Unmarshal(b, &back); err != nil || back.D() != c.d {
			t.Errorf("%s reads back as %s (%v)", b, back.D(), err)
		}
	}
	b, _ := json.Marshal(in{Budget: Duration(30 * time.Minute)})
	if string(b) != `{"budget":"30m"}` {
		t.Errorf("omitempty/zero: %s", b)
	}
	var old in
	if err := json.Unmarshal([]byte(`{"pickup":10000000000,"budget":1.8e12}`), &old); err != nil || old.Pickup.D() != 10*time.Second || old.Budget.D() != 30*time.Minute {
		t.Errorf("old nanoseconds: %+v %v", old, err)
	}
	var bad in
	if err := json.Unmarshal([]byte(`{"pickup":"ten seconds"}`), &bad); err == nil {
		t.Error("a bad string was accepted")
	}
}
