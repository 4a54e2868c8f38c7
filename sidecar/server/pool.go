package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"net/http"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/jwtauth"
	"github.com/tetherproxy/tether/sidecar/lifecycle"
	"github.com/tetherproxy/tether/sidecar/loadscrape"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/modelserver"
	"github.com/tetherproxy/tether/sidecar/outlier"
	"github.com/tetherproxy/tether/sidecar/proxy"
	"github.com/tetherproxy/tether/sidecar/resolve"
	"github.com/tetherproxy/tether/sidecar/responses"
	"github.com/tetherproxy/tether/sidecar/session"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/token"
)

// poolDeps are the parts every pool shares.
type poolDeps struct {
	deps    Deps
	store   store.Store
	claims  *jwtauth.Verifier
	metrics *metrics.Metrics
	scrapes *http.Client
	keys    *session.KeyHasher
	// responses are the Responses API routing metrics.
	responses *responses.Metrics
}

// poolView is what the debug listener shows of a pool.
type poolView struct {
	cfg  config.Pool
	src  discovery.Source
	bal  *balance.Balancer
	load *loadscrape.Scraper // nil without load scraping
	// outliers is the pool's outlier detection (nil: off; it ejects none).
	outliers *outlier.Detector
}

// newPool wires one pool: its discovery (health-checked, for static
// backends with a health check), outlier detection, transport, load
// scraping, balancer, session tokens, key extractor and resolver; its
// long-running parts join s.background.
func (s *Server) newPool(pc *config.Pool, sh poolDeps) (proxy.Pool, error) {
	log := s.log.With("pool", pc.Name)
	var claims session.ClaimReader
	if sh.claims != nil {
		claims = sh.claims // never a typed nil in the interface
	}
	var extractOpts []session.Option
	var codec *token.Codec
	if tc := pc.SessionToken; tc != nil {
		var err error
		// Tokens expire the pool's TTL after they are issued. A
		// ModelServer's TTL is known only at run time and may change, so
		// its pool's tokens carry no expiry (ttl 0).
		if codec, err = token.New(pc.Name, pc.SessionSticky.TTL(), tc); err != nil {
			return proxy.Pool{}, fmt.Errorf("pools[%s].%w", pc.Name, err)
		}
		extractOpts = append(extractOpts, session.WithTokens(codec))
	}
	keys := func(ss *config.SessionSticky) resolve.Extractor {
		return session.NewExtractor(ss.Sources, claims, extractOpts...)
	}
	var (
		src     discovery.Source
		defined *modelserver.Source // the pool's ModelServer, when it has one
		err     error
	)
	if ref := pc.Backends.ModelServer; ref != nil {
		defined, err = s.newModelServerSource(*pc, *ref, sh, keys, codec != nil)
		src = defined
	} else {
		src, err = s.newSource(pc, sh.deps, s.log)
	}
	if err != nil {
		return proxy.Pool{}, err
	}
	tuning := s.cfg.ProxyFor(pc)
	outliers := outlier.New(outlier.Options{
		Pool: pc.Name, Config: *tuning.OutlierDetection, Reg: s.reg, Log: log,
		// The decode half is what requests connect to, and what is ejected.
		Size: func() int { return len(src.Current().Backends) },
	})
	transport := proxy.NewUpstream(proxy.TransportOptions{
		DialTimeout:       s.cfg.Proxy.DialTimeout.Duration,
		StreamIdleTimeout: s.cfg.Proxy.StreamIdleTimeout.Duration,
		Allowed:           s.discovered,
	})
	s.closers = append(s.closers, transport.CloseIdleConnections)
	s.sources[pc.Name] = src
	s.background = append(s.background, lifecycle.Part{Name: "discovery of " + pc.Name, Run: src.Run})
	view := &poolView{cfg: *pc, src: src, outliers: outliers}
	s.pools = append(s.pools, view)
	var balOpts []balance.Option
	var load resolve.LoadReader
	if lc := pc.Load(); lc != nil {
		sc := loadscrape.New(loadscrape.Options{
			Pool: pc.Name, Config: *lc, Backends: src, Client: sh.scrapes, Reg: s.reg, Log: log,
		})
		s.background = append(s.background, lifecycle.Part{Name: "load scrapes of " + pc.Name, Run: sc.Run})
		balOpts = append(balOpts, balance.WithExtraLoad(sc.ExtraLoad))
		load, view.load = sc, sc
	}
	var sharer store.WorkSharer // the store this pool's work is shared through
	if pc.Affinity.Placement != config.PlacementLeastLoaded {
		eps := balance.DefaultHashEpsilon
		if pc.Affinity.HashEpsilon != nil {
			eps = *pc.Affinity.HashEpsilon
		}
		// Every child exists from the start, so a dashboard's rate is 0, not absent.
		passedOver := map[string]prometheus.Counter{}
		for _, bound := range []string{balance.BoundLoad, balance.BoundBindings, balance.BoundWork} {
			passedOver[bound] = sh.metrics.PlacementsPassedOver.WithLabelValues(pc.Name, bound)
		}
		balOpts = append(balOpts, balance.WithHashPlacement(eps),
			balance.WithPassedOver(func(bound string) { passedOver[bound].Inc() }))
		// Only a shared store's: its first-writer-wins settles what replicas
		// whose counts differ propose. Replicas with memory stores agree by
		// the hash alone, and their counts (each its own) would part them.
		if counter, ok := sh.store.(store.BindingCounter); ok && s.cfg.Store.Backend != config.StoreMemory {
			eps := balance.DefaultBindingEpsilon
			if pc.Affinity.BindingEpsilon != nil {
				eps = *pc.Affinity.BindingEpsilon
			}
			balOpts = append(balOpts, balance.WithBindingBound(eps, counter.CountBindings))
			// Redis settles a race for a new session atomically (the first
			// create wins, the others follow it), so replicas whose counts
			// of work differ still agree. A gossip ring settles it only once
			// the binding has gone round, and a next turn that reaches
			// another replica before it would go where that replica's own
			// count points: there the bound reads the ring's shared view.
			workEps := balance.DefaultWorkEpsilon
			if pc.Affinity.WorkEpsilon != nil {
				workEps = *pc.Affinity.WorkEpsilon
			}
			balOpts = append(balOpts, balance.WithWorkBound(workEps))
			if ws, ok := sh.store.(store.WorkSharer); ok {
				balOpts = append(balOpts, balance.WithWorkView(ws.Work))
				sharer = ws
			}
		}
	}
	bal := balance.New(balOpts...)
	view.bal = bal
	if sharer != nil {
		sharer.ShareWork(bal.WorkAt)
	}
	ro := resolve.Options{
		Pool: pc.Name, TTL: pc.SessionSticky.TTL(), PD: pc.Backends.IsPD(),
		Store: sh.store, Backends: src, Balancer: bal, Outliers: outliers, Metrics: sh.metrics,
		Log: log, Affinity: resolve.AffinityFrom(pc.Affinity), Load: load, Tokens: codec, StoreKeys: sh.keys,
		Responses: sh.responses,
	}
	if s.cfg.Store.Backend == config.StoreGossip {
		ro.ResponseGrace = responseGrace
	}
	if pc.SessionSticky != nil {
		ro.Keys = keys(pc.SessionSticky)
	}
	pp := proxy.Pool{
		Name: pc.Name, Models: pc.Models, Balancer: bal,
		Outliers: outliers, Transport: transport,
		// A ModelServer's trafficPolicy.timeout, when it sets one, is the
		// decision's Timeout and overrides this per request.
		FirstByteTimeout: tuning.FirstByteTimeout.Duration,
		RetryOnTimeout:   tuning.RetriesOnTimeout(),
		PrefillHeader:    pc.Backends.PrefillHeader,
		StripHeaders:     pc.RoutingHeaders(),
	}
	if defined != nil {
		// The ModelServer says whether the pool is PD (pdGroup), its
		// sessions' policy and its model; each may change with the object.
		ro.Policy, pp.Serves = defined.Policy, defined.Serves
	}
	pp.Resolver = resolve.New(ro)
	return pp, nil
}

// newModelServerSource follows the pool's ModelServer: its pods, its
// sessions' policy and its model.
func (s *Server) newModelServerSource(pc config.Pool, ref config.ModelServerRef, sh poolDeps,
	keys func(*config.SessionSticky) resolve.Extractor, haveTokens bool) (*modelserver.Source, error) {
	if sh.deps.Kube == nil || sh.deps.Dynamic == nil {
		return nil, fmt.Errorf("pools[%s].backends.modelServer: needs a Kubernetes client", pc.Name)
	}
	src, err := modelserver.New(modelserver.Options{
		Pool: pc.Name, Ref: ref, Namespace: sh.deps.Namespace, Dynamic: sh.deps.Dynamic, Kube: sh.deps.Kube,
		Keys: keys, HaveJWT: sh.claims != nil, HaveTokens: haveTokens,
		Reg: prometheus.WrapRegistererWith(prometheus.Labels{"pool": pc.Name}, s.reg), Log: s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("pools[%s].backends.modelServer: %w", pc.Name, err)
	}
	return src, nil
}
