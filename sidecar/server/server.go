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
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/downstream"
	"github.com/tetherproxy/tether/sidecar/lifecycle"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/proxy"
	"github.com/tetherproxy/tether/sidecar/responses"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
)

// Deps are what the server does not build from config alone.
type Deps struct {
	// Kube is the Kubernetes client, needed by kubernetes discovery and the
	// gossip store's kubernetes peer discovery; nil otherwise.
	Kube kubernetes.Interface
	// Dynamic reads custom resources (the ModelServers of pools with
	// backends.modelServer); nil otherwise.
	Dynamic dynamic.Interface
	// Namespace, PodName and PodIP are the sidecar's own pod (main reads
	// them from the downward-API env POD_NAMESPACE, POD_NAME and POD_IP):
	// the default namespace of discovery, the gossip member name and the
	// gossip address advertised when store.gossip.advertise is unset.
	Namespace, PodName, PodIP string
	// Store replaces the configured store (tests).
	Store store.Store
	// LogLevel is the level of log's handler, which PUT /debug/loglevel
	// changes at run time; nil: the level cannot be changed.
	LogLevel *slog.LevelVar
	// MappedRequests makes the proxy read every request from its header
	// map, as it reads those httphead leaves to net/http, instead of as a
	// list of fields (tests: the two paths compared).
	MappedRequests bool
}

// Server is a wired sidecar. Create it with New, bind with Listen, then Run.
type Server struct {
	cfg   *config.Config
	log   *slog.Logger
	reg   *prometheus.Registry
	store store.Store
	// sources are the pools' discovery, by pool name.
	sources   map[string]discovery.Source
	pools     []*poolView
	keys      *session.KeyHasher
	level     *slog.LevelVar
	listeners []*listener
	admin     *listener
	// debug serves /debug/* on its own loopback listener; nil when the
	// config has no debug address (then admin serves /debug/* if it is
	// itself on loopback, or nothing does).
	debug *listener
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
	addr  string
	srv   httpServer
	ln    net.Listener
	pools []string
}

// httpServer is what serves a listener: the proxy listeners' own HTTP/1.1
// server (sidecar/downstream), or net/http's for the admin and debug
// listeners.
type httpServer interface {
	Serve(net.Listener) error
	lifecycle.Drainer
}

// New builds every part from cfg. It fails, naming the part, when a store
// or discovery cannot start (Redis unreachable, key files unreadable, ...).
func New(ctx context.Context, cfg *config.Config, log *slog.Logger, deps Deps) (*Server, error) {
	s := &Server{cfg: cfg, log: log, reg: prometheus.NewRegistry(), sources: map[string]discovery.Source{}, level: deps.LogLevel}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()

	st := deps.Store
	limits := &ringLimits{}
	if st == nil {
		var err error
		if st, err = newStore(ctx, cfg, deps, limits, s.reg, log); err != nil {
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

	if cfg.Store.KeySecretFile != "" {
		var err error
		if s.keys, err = session.LoadKeyHasher(cfg.Store.KeySecretFile); err != nil {
			return nil, err
		}
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
		scrapes: &http.Client{Transport: scrapeTransport}, keys: s.keys,
		responses: responses.NewMetrics(s.reg),
	}
	listenerMetrics := newListenerMetrics(s.reg)
	var lpools []limitPool
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
			lpools = append(lpools, limitPool{ttl: cfg.Pools[i].SessionSticky.TTL(), src: s.sources[pp.Name]})
		}
		fields, err := bodyFields(cfg, l)
		if err != nil {
			return nil, err
		}
		h := proxy.New(proxy.Options{
			Pools: pools, MaxBodyBytes: cfg.Proxy.MaxRequestBodyBytes, BodyReadTimeout: cfg.Proxy.BodyReadTimeout.Duration,
			Metrics: shared.metrics, AccessLog: log, Body: fields,
		})
		active, shed := listenerMetrics.of(l.Addr)
		s.listeners = append(s.listeners, &listener{addr: l.Addr, pools: names, srv: &downstream.Server{
			Handler:        proxy.Limit(h, cfg.Proxy.MaxConcurrentRequests, active, shed),
			MaxHeaderBytes: cfg.Proxy.MaxRequestHeaderBytes,
			// No total read or write timeout: a request body may take
			// long to arrive as long as it keeps arriving (the proxy's
			// idle deadline, proxy.bodyReadTimeout), and a response
			// streams for as long as the model generates, as long as the
			// client keeps taking it (proxy.streamIdleTimeout).
			ReadHeaderTimeout: ProxyHeaderTimeout,
			IdleTimeout:       ProxyIdleTimeout,
			WriteIdleTimeout:  cfg.Proxy.StreamIdleTimeout.Duration,
			Log:               log,
			// The proxy reads and forwards a request's fields as a list
			// (proxy's lean path): no header map for the common request.
			ListRequests: !deps.MappedRequests,
		}})
	}
	limits.publish(lpools)
	debugOnAdmin := cfg.Debug == "" && config.IsLoopback(cfg.Admin)
	s.admin = &listener{addr: cfg.Admin, srv: s.controlServer(cfg.Admin, s.adminHandler(debugOnAdmin), adminWriteTimeout)}
	if cfg.Debug != "" {
		s.debug = &listener{addr: cfg.Debug, srv: s.controlServer(cfg.Debug, s.debugHandler(http.NewServeMux()), debugWriteTimeout)}
	}
	ok = true
	return s, nil
}

// Timeouts of the listeners. The proxy's are the ones a slow or idle
// client meets (headers, then the idle time between requests); the admin
// and debug listeners answer small requests at once, except pprof's
// profiles and traces, which the debug listener lets run for a minute.
// The proxy's two are exported for the bench's layer proxy, which serves
// as the sidecar's listener does.
const (
	ProxyHeaderTimeout   = 10 * time.Second
	ProxyIdleTimeout     = 120 * time.Second
	controlHeaderTimeout = 5 * time.Second
	controlReadTimeout   = 10 * time.Second
	controlIdleTimeout   = 60 * time.Second
	adminWriteTimeout    = 30 * time.Second
	debugWriteTimeout    = 90 * time.Second
)

// controlServer is the http.Server of the admin or the debug listener.
func (s *Server) controlServer(addr string, h http.Handler, write time.Duration) *http.Server {
	return &http.Server{
		Addr: addr, Handler: h,
		ReadHeaderTimeout: controlHeaderTimeout,
		ReadTimeout:       controlReadTimeout,
		WriteTimeout:      write,
		IdleTimeout:       controlIdleTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
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
	if s.debug != nil {
		if err := s.debug.listen(); err != nil {
			s.unbind()
			return fmt.Errorf("debug: %w", err)
		}
		// Validate allows only loopback addresses; a name that resolved
		// elsewhere (a hosts file mapping localhost away) is refused here.
		if tcp, ok := s.debug.ln.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
			addr := s.debug.ln.Addr().String()
			s.unbind()
			return fmt.Errorf("debug: %s is bound to %s, not a loopback address", s.cfg.Debug, addr)
		}
	}
	return nil
}

// listen binds l. On a loopback address the connections it accepts get
// no TCP keep-alive probes, which Go turns on by default at the cost of
// four setsockopt(2) calls per accepted connection (6–7% of a sidecar's
// CPU in a burst of new connections, docs/hop-cost.md "Falling behind,
// and coming back"): a peer on loopback cannot vanish without the kernel
// closing its side, and every listener's idle timeout closes an idle
// connection long before probes would give up on it. Elsewhere (a
// listener on the pod's address) Go's default stays.
func (l *listener) listen() (err error) {
	var lc net.ListenConfig
	if config.IsLoopback(l.addr) {
		lc.KeepAlive = -1
	}
	l.ln, err = lc.Listen(context.Background(), "tcp", l.addr)
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

// all is every listener, the admin and debug ones included (nil before
// New is done).
func (s *Server) all() []*listener {
	var out []*listener
	for _, l := range []*listener{s.admin, s.debug} {
		if l != nil {
			out = append(out, l)
		}
	}
	return append(out, s.listeners...)
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

// DebugAddr is the bound debug address (after Listen); "" without a debug
// listener of its own.
func (s *Server) DebugAddr() string {
	if s.debug == nil || s.debug.ln == nil {
		return ""
	}
	return s.debug.ln.Addr().String()
}

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
	if s.debug != nil {
		admin = append(admin, s.debug.part("debug", 0, s.log))
	}
	var serving lifecycle.Group
	addrs := map[string]string{}
	for _, l := range s.listeners {
		serving = append(serving, l.part("listener "+l.addr, s.cfg.Proxy.ShutdownTimeout.Duration, s.log))
		for _, name := range l.pools {
			addrs[name] = l.ln.Addr().String()
		}
	}
	s.log.Info("tether-sidecar serving", "admin", s.AdminAddr(), "debug", s.DebugAddr(), "pools", addrs, "store", s.cfg.Store.Backend,
		"store_keys_keyed", s.keys.Keyed())
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
// serves turns of sessions the ring already knows as new ones; unless
// store.gossip.requireAtStartup is false, which makes a replica ready
// without the ring's state (it pulls it in the background, and sessions
// it binds meanwhile settle by the conflict rule).
func (s *Server) synced() bool {
	waitStore := true
	if g := s.cfg.Store.Gossip; s.cfg.Store.Backend == config.StoreGossip && g != nil {
		waitStore = g.Required()
	}
	if st, ok := s.store.(interface{ Synced() bool }); ok && waitStore && !st.Synced() {
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
