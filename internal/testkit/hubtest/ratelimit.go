package hubtest

import (
	"context"
	"net"

	"golang.org/x/time/rate"
)

// rateListener gives each accepted connection its own send budget of
// rate bytes per second.
type rateListener struct {
	net.Listener
	rate int64
}

func (l *rateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &rateConn{Conn: c, lim: rate.NewLimiter(rate.Limit(l.rate), rateBurst)}, nil
}

// rateBurst is the largest write let through at once (and the limiter's
// bucket): small enough that the cap holds over a fraction of a second.
const rateBurst = 64 << 10

type rateConn struct {
	net.Conn
	lim *rate.Limiter
}

func (c *rateConn) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		n := min(len(p)-done, rateBurst)
		if err := c.lim.WaitN(context.Background(), n); err != nil {
			return done, err
		}
		m, err := c.Conn.Write(p[done : done+n])
		done += m
		if err != nil {
			return done, err
		}
	}
	return done, nil
}
