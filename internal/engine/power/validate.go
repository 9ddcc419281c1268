package power

import (
	"errors"
	"fmt"
	"net"
	"net/url"

	"github.com/sparklane/sparklane/internal/fault"
)

// Validate checks a target's power settings without any I/O — entity id,
// ha_url, where the token comes from, MAC, broadcast address, shutdown
// spec — so `starter` can refuse a bad config before a workflow starts
// instead of halfway through a power-off. It returns every problem at once
// (errors.Join), each naming the target and the key. It does not read the
// token: the worker's environment, not the CLI's, is what counts.
func Validate(t Target) error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: power.%s: %s", t.label(), key, fmt.Sprintf(format, args...)))
	}
	p := t.Power
	if p.Relay != "" {
		if err := checkEntity(p.Relay); err != nil {
			add("relay", "%q is not an entity id like switch.dgx1_outlet", p.Relay)
		}
		if p.HAURL == "" {
			add("ha_url", "empty, but power.relay is set: set the Home Assistant base URL (http://ha.local:8123)")
		} else if u, err := url.Parse(p.HAURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("ha_url", "%q is not an http(s) URL", p.HAURL)
		}
		if p.TokenEnv == "" && p.TokenFile == "" {
			add("token_env", "neither token_env nor token_file is set: name where the Home Assistant token is read from")
		}
	}
	if p.WOL != "" {
		if _, err := MagicPacket(p.WOL); err != nil {
			add("wol", "%q is not a MAC address like aa:bb:cc:dd:ee:ff", p.WOL)
		}
	}
	if p.Broadcast != "" {
		host := p.Broadcast
		if h, _, err := net.SplitHostPort(p.Broadcast); err == nil {
			host = h
		}
		if net.ParseIP(host) == nil {
			add("broadcast", "%q is not an IP address (optionally :port), e.g. 192.168.1.255", p.Broadcast)
		}
	}
	spec, err := ParseShutdown(p.Shutdown, t.SSH != "")
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", t.label(), err))
	}
	if spec.Method == "ssh" && t.SSH == "" {
		add("shutdown", "ssh shutdown needs ssh (user@host:port) on the %s", t.Kind)
	}
	if t.SSH != "" {
		if _, err := nodeSSH(t); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fault.Permanent(fault.InvalidSpec, errors.Join(errs...))
}
