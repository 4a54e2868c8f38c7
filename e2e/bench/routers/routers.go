// Package routers implements the routing policies of the stickiness
// benchmark that are not tether configurations — round robin,
// least-outstanding without stickiness, consistent hashing on the session
// header, and an oracle with one global, perfectly shared binding map — as
// small reverse proxies, one per router replica, served on loopback by the
// benchmark itself.
package routers

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Policies.
const (
	RoundRobin       = "round-robin"
	LeastOutstanding = "least-outstanding"
	ConsistentHash   = "consistent-hash"
	Oracle           = "oracle"
)

// Group is the replicas of one policy over one set of backends. State
// that a policy shares between replicas (the oracle's map and its global
// request counts) lives here; everything else is per replica.
type Group struct {
	policy   string
	backends []*url.URL
	ring     []ringPoint // consistent hashing
	servers  []*http.Server
	urls     []string
	tr       *http.Transport

	mu       sync.Mutex
	bindings map[string]int // oracle: session → backend
	global   []atomic.Int64 // oracle: outstanding requests per backend, over all replicas
}

type ringPoint struct {
	hash    uint32
	backend int
}

// Start serves replicas replicas of policy over backends (host:port) on
// loopback ports.
func Start(policy string, backends []string, replicas int) (*Group, error) {
	addrs := make([]string, replicas)
	for i := range addrs {
		addrs[i] = "127.0.0.1:0"
	}
	return StartAt(policy, backends, addrs)
}

// StartAt is Start with one replica listening on each of addrs.
func StartAt(policy string, backends, addrs []string) (*Group, error) {
	g := &Group{policy: policy, bindings: map[string]int{}, global: make([]atomic.Int64, len(backends))}
	for _, b := range backends {
		g.backends = append(g.backends, &url.URL{Scheme: "http", Host: b})
	}
	switch policy {
	case RoundRobin, LeastOutstanding, Oracle:
	case ConsistentHash:
		g.ring = ring(backends)
	default:
		return nil, fmt.Errorf("unknown policy %q", policy)
	}
	g.tr = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 256,
		DisableCompression:  true,
	}
	for i, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			g.Close()
			return nil, err
		}
		r := &replica{g: g, local: make([]atomic.Int64, len(backends)), next: uint64(i)}
		r.proxy = &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(g.backends[pr.In.Context().Value(backendKey{}).(int)])
				pr.Out.Host = pr.In.Host
			},
			Transport:     g.tr,
			FlushInterval: 0, // SSE (text/event-stream) is flushed at every event by ReverseProxy itself
		}
		srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		g.servers = append(g.servers, srv)
		g.urls = append(g.urls, "http://"+ln.Addr().String())
	}
	return g, nil
}

// URLs are the replicas' base URLs.
func (g *Group) URLs() []string { return g.urls }

// Close stops every replica.
func (g *Group) Close() {
	for _, s := range g.servers {
		_ = s.Close()
	}
	g.tr.CloseIdleConnections()
}

// ring places 160 points per backend on a crc32 circle, as nginx's
// "hash … consistent" (ketama) does.
func ring(backends []string) []ringPoint {
	var pts []ringPoint
	for i, b := range backends {
		for v := range 160 {
			pts = append(pts, ringPoint{crc32.ChecksumIEEE(fmt.Appendf(nil, "%s-%d", b, v)), i})
		}
	}
	slices.SortFunc(pts, func(a, b ringPoint) int { return int(int64(a.hash) - int64(b.hash)) })
	return pts
}

type backendKey struct{}

// replica is one router replica: its own counters, the group's shared state.
type replica struct {
	g     *Group
	proxy *httputil.ReverseProxy
	local []atomic.Int64 // outstanding requests this replica sent, per backend
	next  uint64         // round robin position (atomic)
}

func (r *replica) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b := r.choose(req.Header.Get("X-Session-ID"))
	r.local[b].Add(1)
	r.g.global[b].Add(1)
	defer func() { r.local[b].Add(-1); r.g.global[b].Add(-1) }()
	// The body is read whole first, as a router that reads the model
	// from it does (and tether does).
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	out := req.WithContext(context.WithValue(req.Context(), backendKey{}, b))
	out.Body = io.NopCloser(bytes.NewReader(body))
	r.proxy.ServeHTTP(w, out)
}

func (r *replica) choose(session string) int {
	g := r.g
	switch g.policy {
	case RoundRobin:
		return int(atomic.AddUint64(&r.next, 1) % uint64(len(g.backends)))
	case LeastOutstanding:
		return least(r.local)
	case ConsistentHash:
		h := crc32.ChecksumIEEE([]byte(session))
		i, _ := slices.BinarySearchFunc(g.ring, h, func(p ringPoint, h uint32) int { return int(int64(p.hash) - int64(h)) })
		return g.ring[i%len(g.ring)].backend
	}
	// Oracle: one map every replica sees at once; new sessions go to the
	// backend with the fewest requests in flight over all replicas.
	if session == "" {
		return least(g.global)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.bindings[session]
	if !ok {
		b = least(g.global)
		g.bindings[session] = b
	}
	return b
}

// least returns a backend with the fewest outstanding requests (ties at random).
func least(counts []atomic.Int64) int {
	best, ties := 0, 0
	for i := range counts {
		c, bc := counts[i].Load(), counts[best].Load()
		switch {
		case i == 0 || c < bc:
			best, ties = i, 1
		case c == bc:
			if ties++; rand.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}
