package scale

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/sidecar/config"
	redisstore "github.com/tetherproxy/tether/sidecar/store/redisstore"
)

// relay forwards TCP connections to a Redis server and counts round
// trips: every time a client starts writing after the server last spoke
// (or first), one request went out and waited for its answer. A pipeline
// written in pieces is still one round trip.
type relay struct {
	ln     net.Listener
	target string
	rounds atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn // closed by close
}

func newRelay(target string) (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln, target: target}
	r.wg.Go(r.accept)
	return r, nil
}

func (r *relay) addr() string { return r.ln.Addr().String() }

// close stops accepting, cuts every relayed connection and waits for the
// copying goroutines.
func (r *relay) close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", r.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, s)
		r.mu.Unlock()
		var serverSpoke atomic.Bool
		serverSpoke.Store(true)
		r.wg.Go(func() { // client → server
			defer s.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if serverSpoke.Swap(false) {
						r.rounds.Add(1)
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
		r.wg.Go(func() { // server → client
			defer c.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					serverSpoke.Store(true)
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// RoundTrips are Redis round trips per request through a real sidecar.
type RoundTrips struct {
	NewSession float64 // first turn: lookup (miss) + create-if-absent
	Sticky     float64 // later turns: one lookup-and-refresh
}

// redisRoundTrips runs a tether-sidecar with the Redis store behind a
// counting relay and sends sessions first turns, then turns later turns each.
func redisRoundTrips(env *procs.Env, redisAddr string, sessions, turns int) (RoundTrips, error) {
	var rt RoundTrips
	_, backend, err := env.Modelsim("rt-backend", "--prefill-per-token", "0", "--decode-per-token", "0")
	if err != nil {
		return rt, err
	}
	rel, err := newRelay(redisAddr)
	if err != nil {
		return rt, err
	}
	defer rel.close()
	side, err := env.Sidecar(procs.Sidecar{Name: "rt-sidecar", Store: "redis", RedisAddr: rel.addr(),
		Backends: []string{backend}, LogLevel: "warn"})
	if err != nil {
		return rt, err
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	send := func(s int) error {
		req, _ := http.NewRequest(http.MethodPost, "http://"+side.Addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"modelsim","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Session-ID", fmt.Sprint("rt-", s))
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	phase := func(turns int) (float64, error) {
		before := rel.rounds.Load()
		for range turns {
			for s := range sessions {
				if err := send(s); err != nil {
					return 0, err
				}
			}
		}
		return float64(rel.rounds.Load()-before) / float64(turns*sessions), nil
	}
	if rt.NewSession, err = phase(1); err != nil {
		return rt, err
	}
	rt.Sticky, err = phase(turns)
	return rt, err
}

// redisLookups fills a real redis-server with n bindings through the
// Redis store and measures lookups per CPU-second, this process's CPU
// and redis-server's together.
func redisLookups(server *procs.Process, addr string, n int, d time.Duration) (float64, error) {
	cfg := &config.RedisStore{Address: addr, Timeout: config.Duration{Duration: time.Second}, KeyPrefix: "scale"}
	s, err := redisstore.New(context.Background(), cfg, redisstore.Options{Reg: prometheus.NewRegistry()})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if _, err := fill(s, 0, n); err != nil {
		return 0, err
	}
	rate, misses, err := lookupRate(s, n, d, func() time.Duration { return server.Usage().CPU })
	if err == nil && misses > 0 {
		err = fmt.Errorf("%d lookups of existing bindings missed", misses)
	}
	return rate, err
}
