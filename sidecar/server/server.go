// Package server wires a sidecar from its config and runs it: stores,
// discovery, one resolver per pool, one proxy handler per listener, the
// admin listener, and a graceful shutdown that drains in-flight streams.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/jwtauth"
	"github.com/tetherproxy/tether/sidecar/loadscrape"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/proxy"
	"github.com/tetherproxy/tether/sidecar/resolve"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/token"
)

// Deps are what the server does not build from config alone.
type Deps struct {
	// Kube is the Kubernetes client, needed by kubernetes discovery and the
	// gossip store's kubernetes peer discovery; nil otherwise.
	Kube kubernetes.Interface
	// Namespace is the sidecar's own namespace (POD_NAMESPACE).
	Namespace string
	// Store replaces the configured store (tests).
	Store store.Store
}

// Server is a wired sidecar. Create it with New, bind with Listen, then Run.
type Server struct {
	cfg     *config.Config
	log     *slog.Logger
	reg     *prometheus.Registry
	store   store.Store
	pools   map[string]*poolState
	servers []*http.Server
	lns     []net.Listener
	admin   *http.Server
	adminLn net.Listener
	// poolAddr maps a pool name to the address its listener bound.
	poolAddr map[string]string
	starters []func(context.Context) error
	closers  []func()
	ready    atomic.Bool
	stopping atomic.Bool
}

type poolState struct {
	cfg      config.Pool
	source   discovery.Source
	resolver *resolve.Resolver
}

// New builds every part from cfg. It fails, naming the part, when a store
// or discovery cannot start (Redis unreachable, key files unreadable, ...).
func New(ctx context.Context, cfg *config.Config, log *slog.Logger, deps Deps) (*Server, error) {
	s := &Server{cfg: cfg, log: log, reg: prometheus.NewRegistry(), pools: map[string]*poolState{}, poolAddr: map[string]string{}}
	s.reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	m := metrics.New(s.reg)

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
		s.starters = append(s.starters, func(ctx context.Context) error { claims.Run(ctx); return nil })
	}

	failed := resolve.NewFailSet(cfg.Proxy.FailTimeout.Duration, nil)
	// Load scrapes have a transport of their own (no idle connections
	// shared with the data path) under the same guard: only discovered
	// backends are dialled.
	scrapeTransport := proxy.NewTransport(proxy.TransportOptions{DialTimeout: cfg.Proxy.DialTimeout.Duration, Allowed: s.discovered})
	s.closers = append(s.closers, scrapeTransport.CloseIdleConnections)
	byListen := map[string][]proxy.Pool{}
	var order []string
	shared := poolDeps{deps: deps, store: st, claims: claims, failed: failed, metrics: m, scrapes: &http.Client{Transport: scrapeTransport}}
	for _, pc := range cfg.Pools {
		pp, err := s.newPool(pc, shared)
		if err != nil {
			return nil, err
		}
		if _, seen := byListen[pc.Listen]; !seen {
			order = append(order, pc.Listen)
		}
		byListen[pc.Listen] = append(byListen[pc.Listen], pp)
	}

	transport := proxy.NewTransport(proxy.TransportOptions{
		DialTimeout:           cfg.Proxy.DialTimeout.Duration,
		ResponseHeaderTimeout: cfg.Proxy.ResponseHeaderTimeout.Duration,
		Allowed:               s.discovered,
	})
	s.closers = append(s.closers, transport.CloseIdleConnections)
	for _, listen := range order {
		h := proxy.New(proxy.Options{
			Pools: byListen[listen], MaxBodyBytes: cfg.Proxy.MaxRequestBodyBytes,
			Transport: transport, Metrics: m, AccessLog: log,
		})
		s.servers = append(s.servers, &http.Server{
			Addr:              listen,
			Handler:           h,
			MaxHeaderBytes:    cfg.Proxy.MaxRequestHeaderBytes,
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       120 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		})
	}
	s.admin = &http.Server{Addr: cfg.Admin, Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
	ok = true
	return s, nil
}

// poolDeps are the parts every pool shares.
type poolDeps struct {
	deps    Deps
	store   store.Store
	claims  *jwtauth.Verifier
	failed  *resolve.FailSet
	metrics *metrics.Metrics
	scrapes *http.Client
}

// newPool wires one pool: its discovery, load scraping, balancer, session
// tokens, key extractor and resolver; background loops join s.starters.
func (s *Server) newPool(pc config.Pool, sh poolDeps) (proxy.Pool, error) {
	log := s.log.With("pool", pc.Name)
	src, err := newSource(pc, sh.deps, s.reg, s.log)
	if err != nil {
		return proxy.Pool{}, err
	}
	s.starters = append(s.starters, src.Run)
	var balOpts []balance.Option
	var load resolve.LoadReader
	if lc := pc.Load(); lc != nil {
		sc := loadscrape.New(loadscrape.Options{
			Pool: pc.Name, Config: *lc, Backends: src, Client: sh.scrapes, Reg: s.reg, Log: log,
		})
		s.starters = append(s.starters, sc.Run)
		balOpts = append(balOpts, balance.WithExtraLoad(sc.ExtraLoad))
		load = sc
	}
	bal := balance.New(balOpts...)
	var keys session.ClaimReader
	if sh.claims != nil {
		keys = sh.claims // never a typed nil in the interface
	}
	pp := proxy.Pool{Name: pc.Name, Models: pc.Models, Balancer: bal, PrefillHeader: pc.Backends.PrefillHeader, StripHeaders: pc.RoutingHeaders()}
	ro := resolve.Options{
		Pool: pc.Name, TTL: pc.SessionSticky.TTL(), PD: pc.Backends.IsPD(),
		Store: sh.store, Backends: src, Balancer: bal, Failed: sh.failed, Metrics: sh.metrics,
		Log: log, Affinity: resolve.AffinityFrom(pc.Affinity), Load: load,
	}
	var extractOpts []session.Option
	if tc := pc.SessionToken; tc != nil {
		codec, err := token.New(pc.Name, tc)
		if err != nil {
			return proxy.Pool{}, fmt.Errorf("pools[%s].%w", pc.Name, err)
		}
		extractOpts = append(extractOpts, session.WithTokens(codec))
		ro.Tokens = codec
	}
	ro.Keys = session.NewExtractor(pc.SessionSticky.Sources, keys, extractOpts...)
	r := resolve.New(ro)
	pp.Resolver = r
	s.pools[pc.Name] = &poolState{cfg: pc, source: src, resolver: r}
	return pp, nil
}

// discovered is the transport's dial guard: only addresses of backends
// some pool currently lists are ever dialled.
func (s *Server) discovered(addr string) bool {
	for _, p := range s.pools {
		if p.source.Current().HasAddr(addr) {
			return true
		}
	}
	return false
}

// Listen binds every listener, so the process fails before serving when a
// port is taken, and tests can bind port 0 and read the addresses.
func (s *Server) Listen() error {
	for _, srv := range s.servers {
		ln, err := net.Listen("tcp", srv.Addr)
		if err != nil {
			s.closeListeners()
			return fmt.Errorf("listen: %w", err)
		}
		s.lns = append(s.lns, ln)
		for name, p := range s.pools {
			if p.cfg.Listen == srv.Addr {
				s.poolAddr[name] = ln.Addr().String()
			}
		}
	}
	ln, err := net.Listen("tcp", s.admin.Addr)
	if err != nil {
		s.closeListeners()
		return fmt.Errorf("admin: %w", err)
	}
	s.adminLn = ln
	return nil
}

func (s *Server) closeListeners() {
	for _, ln := range s.lns {
		ln.Close()
	}
	s.lns = nil
}

// PoolAddr is the bound address of a pool's listener (after Listen).
func (s *Server) PoolAddr(pool string) string { return s.poolAddr[pool] }

// AdminAddr is the bound admin address (after Listen).
func (s *Server) AdminAddr() string { return s.adminLn.Addr().String() }

// Registry is the server's metrics registry.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Run serves until ctx ends, then shuts down gracefully: readiness drops
// first, in-flight requests (long streams included) get
// proxy.shutdownTimeout to finish, then the store is closed (a gossip
// replica leaves its ring) and discovery stops.
func (s *Server) Run(ctx context.Context) error {
	if s.adminLn == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	defer s.close()
	bg, bgCancel := context.WithCancel(context.Background())
	defer bgCancel()
	g, gctx := errgroup.WithContext(bg)
	for _, start := range s.starters {
		g.Go(func() error { return start(gctx) })
	}
	serveErr := make(chan error, len(s.servers)+1)
	serve := func(srv *http.Server, ln net.Listener) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
		}
	}
	for i, srv := range s.servers {
		go serve(srv, s.lns[i])
	}
	go serve(s.admin, s.adminLn)
	go s.watchReady(gctx)
	s.log.Info("tether-sidecar serving", "admin", s.AdminAddr(), "pools", s.poolAddr, "store", s.cfg.Store.Backend)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-serveErr:
	case <-gctx.Done():
		runErr = fmt.Errorf("background task failed: %w", context.Cause(gctx))
		if err := g.Wait(); err != nil {
			runErr = err
		}
	}
	s.stopping.Store(true)
	s.ready.Store(false)
	s.log.Info("shutting down: draining in-flight requests", "timeout", s.cfg.Proxy.ShutdownTimeout.Duration)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.Proxy.ShutdownTimeout.Duration)
	defer cancel()
	for _, srv := range s.servers {
		if err := srv.Shutdown(sctx); err != nil {
			s.log.Warn("drain incomplete; closing remaining connections", "err", err)
			srv.Close()
		}
	}
	s.admin.Close()
	bgCancel()
	if err := g.Wait(); err != nil && runErr == nil && !errors.Is(err, context.Canceled) {
		runErr = err
	}
	return runErr
}

// watchReady turns ready once the store and every pool's discovery have synced.
func (s *Server) watchReady(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if s.synced() {
			s.ready.Store(!s.stopping.Load())
			s.log.Info("ready")
			return
		}
		select {
		case <-ctx.Done():
			return
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
	for _, p := range s.pools {
		if !p.source.Synced() {
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
