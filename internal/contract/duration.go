package contract

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Duration is a time.Duration that travels in workflow and activity
// inputs and results as a human string ("2s", "30m", "1h30m") instead of
// nanoseconds, so the web UI and `temporal workflow show` read like the
// config that set it. It decodes both forms: histories recorded before it
// hold nanosecond numbers, and they must still replay.
type Duration time.Duration

// D is the value as a time.Duration, for timers, contexts and arithmetic.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String is the shortest Go duration string: "30m", not "30m0s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// MarshalJSON writes the human string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string ("90s") or, as old histories hold
// it, a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		return nil
	}
	if strings.HasPrefix(s, `"`) {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		v, err := time.ParseDuration(strings.TrimSpace(str))
		if err != nil {
			return fmt.Errorf("%q is not a duration: write it like \"5s\", \"2m\" or \"1h30m\"", str)
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		var f float64 // a number written with an exponent
		if ferr := json.Unmarshal(b, &f); ferr != nil {
			return fmt.Errorf("duration %s: want a string like \"5s\" or nanoseconds: %w", s, err)
		}
		n = int64(f)
	}
	*d = Duration(n)
	return nil
}
