// Package server wires a sidecar from its config and runs it: the store,
// discovery, one resolver per pool, one proxy handler per listener
// (config.Listeners), the admin listener, and a graceful shutdown that
// drains in-flight streams. Every long-running part runs in one
// lifecycle.Run.
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/lifecycle"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/proxy"
	"github.com/tetherproxy/tether/sidecar/store"
)

// Deps are what the server does not build from config alone.
type Deps struct {
	// Kube is the Kubernetes client, needed by kubernetes discovery and the
	// gossip store's kubernetes peer discovery; nil otherwise.
	Kube kubernetes.Interface
	// Namespace, PodName and PodIP are the sidecar's own pod (main reads
	// them from the downward-API env POD_NAMESPACE, POD_NAME and POD_IP):
	// the default namespace of discovery, the gossip member name and the
	// gossip address advertised when store.gossip.advertise is unset.
	Namespace, PodName, PodIP string
	// Store replaces the configured store (tests).
	Store store.Store
}

// Server is a wired sidecar. Create it with New, bind with Listen, then Run.
type Server struct {
	cfg   *config.Config
	log   *slog.Logger
	reg   *prometheus.Registry
	store store.Store
	// sources are the pools' discovery, by pool name.
	sources   map[string]discovery.Source
	listeners []*listener
	admin     *listener
	// background are the parts the listeners read from: discovery, load
	// scrapes, key reloads; they stop after the listeners have drained.
	background []lifecycle.Part
	closers    []func()
	ready      atomic.Bool
	stopping   atomic.Bool
}

// listener is one address the server serves, with the pools served there
// (none for the admin listener).
type listener struct {
	srv   *http.Server
	ln    net.Listener
	pools []string
}

// New builds every part from cfg. It fails, naming the part, when a store
// or discovery cannot start (Redis unreachable, key files unreadable, ...).
func New(ctx context.Context, cfg *config.Config, log *slog.Logger, deps Deps) (*Server, error) {
	s := &Server{cfg: cfg, log: log, reg: prometheus.NewRegistry(), sources: map[string]discovery.Source{}}
	s.reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()

	st := deps.Store
	if st == nil {
		var err error
		if st, err = newStore(ctx, cfg, deps, s.reg, log); err != nil {
			return nil, err
		}
	}
	s.store = st
	s.closers = append(s.closers, func() {
		if err := st.Close(); err != nil {
			log.Warn("closing store", "err", err)
		}
	})
	if c, ok := st.(store.Counter); ok {
		s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tether_bindings_live",
			Help: "Bindings held by this replica's store (expired ones not yet swept included).",
		}, func() float64 { return float64(c.Len()) }))
	}

	claims, err := newClaimReader(cfg, s.reg, log)
	if err != nil {
		return nil, err
	}
	if claims != nil {
		s.background = append(s.background, lifecycle.Part{Name: "jwt key reload", Run: claims.Run})
	}

	// Load scrapes have a transport of their own (no idle connections
	// shared with the data path) under the same guard: only discovered
	// backends are dialled.
	scrapeTransport := proxy.NewTransport(proxy.TransportOptions{DialTimeout: cfg.Proxy.DialTimeout.Duration, Allowed: s.discovered})
	s.closers = append(s.closers, scrapeTransport.CloseIdleConnections)
	shared := poolDeps{
		deps: deps, store: st, claims: claims, metrics: metrics.New(s.reg),
		scrapes: &http.Client{Transport: scrapeTransport},
	}
	for _, l := range cfg.Listeners() {
		var pools []proxy.Pool
		var names []string
		for _, i := range l.Pools {
			pp, err := s.newPool(&cfg.Pools[i], shared)
			if err != nil {
				return nil, err
			}
			pools = append(pools, pp)
			names = append(names, pp.Name)
		}
		h := proxy.New(proxy.Options{
			Pools: pools, MaxBodyBytes: cfg.Proxy.MaxRequestBodyBytes,
			Metrics: shared.metrics, AccessLog: log,
		})
		s.listeners = append(s.listeners, &listener{pools: names, srv: &http.Server{
			Addr:              l.Addr,
			Handler:           h,
			MaxHeaderBytes:    cfg.Proxy.MaxRequestHeaderBytes,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       120 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}})
	}
	s.admin = &listener{srv: &http.Server{Addr: cfg.Admin, Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second}}
	ok = true
	return s, nil
}

// discovered is the transport's dial guard: only addresses of backends
// some pool currently lists are ever dialled.
func (s *Server) discovered(addr string) bool {
	for _, src := range s.sources {
		if src.Current().HasAddr(addr) {
			return true
		}
	}
	return false
}

// Listen binds every listener, so the process fails before serving when a
// port is taken, and tests can bind port 0 and read the addresses.
func (s *Server) Listen() error {
	for _, l := range s.listeners {
		if err := l.listen(); err != nil {
			s.unbind()
			return fmt.Errorf("listen: %w", err)
		}
	}
	if err := s.admin.listen(); err != nil {
		s.unbind()
		return fmt.Errorf("admin: %w", err)
	}
	return nil
}

func (l *listener) listen() (err error) {
	l.ln, err = net.Listen("tcp", l.srv.Addr)
	return err
}

// unbind closes and forgets the listeners a failed Listen bound.
func (s *Server) unbind() {
	s.closeListeners()
	for _, l := range s.all() {
		l.ln = nil
	}
}

func (s *Server) closeListeners() {
	for _, l := range s.all() {
		if l.ln != nil {
			l.ln.Close()
		}
	}
}

// all is every listener, the admin one included (nil before New is done).
func (s *Server) all() []*listener {
	if s.admin == nil {
		return s.listeners
	}
	return append([]*listener{s.admin}, s.listeners...)
}

// PoolAddr is the bound address of a pool's listener (after Listen).
func (s *Server) PoolAddr(pool string) string {
	for _, l := range s.listeners {
		for _, name := range l.pools {
			if name == pool && l.ln != nil {
				return l.ln.Addr().String()
			}
		}
	}
	return ""
}

// AdminAddr is the bound admin address (after Listen).
func (s *Server) AdminAddr() string { return s.admin.ln.Addr().String() }

// Registry is the server's metrics registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Run serves until ctx ends, then shuts down gracefully: readiness drops
// first, in-flight requests (long streams included) get
// proxy.shutdownTimeout to finish, the admin listener closes, discovery
// and the other background parts stop, and then the store is closed (a
// gossip replica leaves its ring).
func (s *Server) Run(ctx context.Context) error {
	if s.admin.ln == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	defer s.close()
	background := append(lifecycle.Group{{Name: "readiness", Run: s.watchReady}}, s.background...)
	admin := lifecycle.Group{s.admin.part("admin", 0, s.log)}
	var serving lifecycle.Group
	addrs := map[string]string{}
	for _, l := range s.listeners {
		serving = append(serving, l.part("listener "+l.srv.Addr, s.cfg.Proxy.ShutdownTimeout.Duration, s.log))
		for _, name := range l.pools {
			addrs[name] = l.ln.Addr().String()
		}
	}
	s.log.Info("tether-sidecar serving", "admin", s.AdminAddr(), "pools", addrs, "store", s.cfg.Store.Backend)
	return lifecycle.Run(ctx, s.drain, background, admin, serving)
}

// part serves the listener until stopped, then drains it for drain.
func (l *listener) part(name string, drain time.Duration, log *slog.Logger) lifecycle.Part {
	return lifecycle.HTTPServer(name, l.srv, func() error { return l.srv.Serve(l.ln) }, drain, log)
}

// drain is the first step of a shutdown: readiness drops before any
// listener stops, so no new traffic is routed here while streams drain.
func (s *Server) drain() {
	s.stopping.Store(true)
	s.ready.Store(false)
	s.log.Info("shutting down: draining in-flight requests", "timeout", s.cfg.Proxy.ShutdownTimeout.Duration)
}

// watchReady turns ready once the store and every pool's discovery have synced.
func (s *Server) watchReady(ctx context.Context) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if s.synced() {
			s.ready.Store(!s.stopping.Load())
			s.log.Info("ready")
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// synced: every pool's discovery has its first complete view, and a store
// that receives state from peers (gossip) has it, so a new replica never
// serves turns of sessions the ring already knows as new ones.
func (s *Server) synced() bool {
	if st, ok := s.store.(interface{ Synced() bool }); ok && !st.Synced() {
		return false
	}
	for _, src := range s.sources {
		if !src.Synced() {
			return false
		}
	}
	return true
}

func (s *Server) close() {
	s.closeListeners()
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}
