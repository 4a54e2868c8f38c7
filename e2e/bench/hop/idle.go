package hop

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/table"
	"github.com/tetherproxy/tether/sidecar/peek"
)

// IdleCost is what a proxy's idle keep-alive client connections cost it
// (Options.IdleConns): clients that made a request each and keep their
// connections for the next, as a router's pool of connections to its
// sidecar does between bursts.
type IdleCost struct {
	Proxy string
	// Conns connections were opened twice: the proxy's resident memory
	// was read before (RSS0), after the first Conns (RSS1) and after the
	// second (RSS2). The second step's growth is the cost per connection:
	// the first also fills what the proxy freed after the points (a
	// collected heap, pooled buffers) and so reads low.
	Conns            int
	RSS0, RSS1, RSS2 int64
	// IdleCPU is the proxy's CPU while all 2×Conns sat idle for IdleFor:
	// its timers, tickers and monitors.
	IdleCPU, IdleFor time.Duration
}

// PerConn is the resident memory one more idle connection costs, bytes.
func (c IdleCost) PerConn() float64 { return float64(c.RSS2-c.RSS1) / float64(c.Conns) }

// measureIdle opens o.IdleConns connections to t twice, each after one
// request of its own session, and reads what they cost the proxy.
func measureIdle(ctx context.Context, t *target, o Options) (IdleCost, error) {
	extra, err := HeaderLines(o.Headers)
	if err != nil {
		return IdleCost{}, err
	}
	n := o.IdleConns
	c := newClient(t, nil, 2*n, NonStreaming, extra, o.PromptBytes)
	var held []net.Conn
	defer func() { closeAll(held) }()
	open := func(from int) (err error) {
		held, err = openIdle(ctx, t, c, from, n, held)
		return err
	}
	settle := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.IdleFor):
			return t.proc.Exited()
		}
	}
	cost := IdleCost{Proxy: t.name, Conns: n, IdleFor: o.IdleFor}
	cost.RSS0 = t.proc.RSS()
	if err := open(0); err != nil {
		return cost, err
	}
	if err := settle(); err != nil {
		return cost, err
	}
	cost.RSS1 = t.proc.RSS()
	if err := open(n); err != nil {
		return cost, err
	}
	if err := settle(); err != nil {
		return cost, err
	}
	cost.RSS2 = t.proc.RSS()
	before := t.proc.Usage().CPU
	if err := settle(); err != nil {
		return cost, err
	}
	cost.IdleCPU = t.proc.Usage().CPU - before
	// A proxy that closed some while they idled (an idle timeout shorter
	// than the measurement) would read cheaper than it is.
	closed := 0
	for _, nc := range held {
		if closedByPeer(nc) {
			closed++
		}
	}
	if closed > 0 {
		return cost, fmt.Errorf("%s: closed %d of its %d idle connections while they were measured", t.name, closed, len(held))
	}
	return cost, nil
}

// openIdle opens n connections to t, each sending request from..from+n-1
// of c's sessions and reading its answer, and appends them to held,
// which it returns (with those opened before an error).
func openIdle(ctx context.Context, t *target, c *client, from, n int, held []net.Conn) ([]net.Conn, error) {
	for i := from; i < from+n; i++ {
		s := &c.sessions[i]
		// A small reader: the client's side is not measured, but
		// thousands of the load's size would be the bench's memory.
		cn, err := dial(ctx, s.pool.addr, 1024)
		if err != nil {
			return held, fmt.Errorf("%s: idle connection %d: %w", t.name, i+1, err)
		}
		held = append(held, cn.nc)
		keep, _, err := c.exchange(cn, s.req)
		if err != nil || !keep {
			return held, fmt.Errorf("%s: idle connection %d: its request: keep-alive %v, err %v", t.name, i+1, keep, err)
		}
		if err := cn.nc.SetDeadline(time.Time{}); err != nil {
			return held, err
		}
	}
	return held, nil
}

func closeAll(conns []net.Conn) {
	for _, nc := range conns {
		nc.Close()
	}
}

// holdIdle opens o.IdleHeld idle connections to every proxy but direct,
// to be held through the points; the caller closes them.
func holdIdle(ctx context.Context, o Options, targets map[string]*target) ([]net.Conn, error) {
	extra, err := HeaderLines(o.Headers)
	if err != nil {
		return nil, err
	}
	var held []net.Conn
	for _, name := range o.Proxies {
		if name == Direct {
			continue
		}
		c := newClient(targets[name], nil, o.IdleHeld, NonStreaming, extra, o.PromptBytes)
		if held, err = openIdle(ctx, targets[name], c, 0, o.IdleHeld, held); err != nil {
			return held, err
		}
	}
	return held, nil
}

// closedByPeer reports whether nc's peer has closed it (or it failed):
// a peek that does not wait (package peek, the sidecar's own) finds its
// end or an error rather than nothing to read yet.
func closedByPeer(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	var p peek.Prober
	n, errno, err := p.Probe(raw)
	return err != nil || n == 0 && !peek.Empty(errno)
}

// IdleTable is the idle connections' cost per proxy, or nil without it.
func (r *Results) IdleTable() *table.Table {
	if len(r.Idle) == 0 {
		return nil
	}
	c0 := r.Idle[0]
	t := &table.Table{
		Title: fmt.Sprintf("idle keep-alive client connections, each after one request: resident memory a connection adds (%d opened, then %d more: the second step's growth ÷ %d), and the proxy's CPU while all %d sat idle for %v",
			c0.Conns, c0.Conns, c0.Conns, 2*c0.Conns, c0.IdleFor),
		Head: []string{"proxy", "KiB per connection", "÷ HAProxy", "RSS before, MiB", "after 2×", "idle CPU ms/s"},
	}
	var ha float64
	for _, c := range r.Idle {
		if c.Proxy == HAProxy {
			ha = c.PerConn()
		}
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
	for _, c := range r.Idle {
		vs := "—"
		if ha > 0 {
			vs = Ratio(c.PerConn(), ha)
		}
		t.Add(Labels[c.Proxy], fmt.Sprintf("%.1f", c.PerConn()/1024), vs, mib(c.RSS0), mib(c.RSS2),
			fmt.Sprintf("%.2f", float64(c.IdleCPU.Microseconds())/1000/c.IdleFor.Seconds()))
	}
	return t
}
