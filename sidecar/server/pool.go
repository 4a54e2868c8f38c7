package server

import (
	"fmt"
	"net/http"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/jwtauth"
	"github.com/tetherproxy/tether/sidecar/lifecycle"
	"github.com/tetherproxy/tether/sidecar/loadscrape"
	"github.com/tetherproxy/tether/sidecar/metrics"
	"github.com/tetherproxy/tether/sidecar/outlier"
	"github.com/tetherproxy/tether/sidecar/proxy"
	"github.com/tetherproxy/tether/sidecar/resolve"
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
	src, err := s.newSource(pc, sh.deps, s.log)
	if err != nil {
		return proxy.Pool{}, err
	}
	pp := s.cfg.ProxyFor(pc)
	outliers := outlier.New(outlier.Options{
		Pool: pc.Name, Config: *pp.OutlierDetection, Reg: s.reg, Log: log,
		// The decode half is what requests connect to, and what is ejected.
		Size: func() int { return len(src.Current().Backends) },
	})
	transport := proxy.NewTransport(proxy.TransportOptions{
		DialTimeout:      s.cfg.Proxy.DialTimeout.Duration,
		FirstByteTimeout: pp.FirstByteTimeout.Duration,
		Allowed:          s.discovered,
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
	if pc.Affinity.Placement != config.PlacementLeastLoaded {
		eps := balance.DefaultHashEpsilon
		if pc.Affinity.HashEpsilon != nil {
			eps = *pc.Affinity.HashEpsilon
		}
		balOpts = append(balOpts, balance.WithHashPlacement(eps))
	}
	bal := balance.New(balOpts...)
	view.bal = bal
	var claims session.ClaimReader
	if sh.claims != nil {
		claims = sh.claims // never a typed nil in the interface
	}
	ro := resolve.Options{
		Pool: pc.Name, TTL: pc.SessionSticky.TTL(), PD: pc.Backends.IsPD(),
		Store: sh.store, Backends: src, Balancer: bal, Outliers: outliers, Metrics: sh.metrics,
		Log: log, Affinity: resolve.AffinityFrom(pc.Affinity), Load: load, StoreKeys: sh.keys,
	}
	var extractOpts []session.Option
	if tc := pc.SessionToken; tc != nil {
		codec, err := token.New(pc.Name, pc.SessionSticky.TTL(), tc)
		if err != nil {
			return proxy.Pool{}, fmt.Errorf("pools[%s].%w", pc.Name, err)
		}
		extractOpts = append(extractOpts, session.WithTokens(codec))
		ro.Tokens = codec
	}
	ro.Keys = session.NewExtractor(pc.SessionSticky.Sources, claims, extractOpts...)
	return proxy.Pool{
		Name: pc.Name, Models: pc.Models, Resolver: resolve.New(ro), Balancer: bal,
		Outliers: outliers, Transport: transport,
		PrefillHeader: pc.Backends.PrefillHeader, StripHeaders: pc.RoutingHeaders(),
	}, nil
}
