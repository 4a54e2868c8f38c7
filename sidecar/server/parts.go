package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/discovery/kube"
	"github.com/tetherproxy/tether/sidecar/healthcheck"
	"github.com/tetherproxy/tether/sidecar/jwtauth"
	"github.com/tetherproxy/tether/sidecar/proxy"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/gossip"
	"github.com/tetherproxy/tether/sidecar/store/memory"
	"github.com/tetherproxy/tether/sidecar/store/redisstore"
)

// newStore builds the configured store. Shared stores fail here, before
// anything listens, when they cannot start.
func newStore(ctx context.Context, cfg *config.Config, deps Deps, limits gossip.Limits, reg prometheus.Registerer, log *slog.Logger) (store.Store, error) {
	switch cfg.Store.Backend {
	case config.StoreMemory:
		return memory.New(ctx, &cfg.Store.Memory, memory.Options{})
	case config.StoreRedis:
		return redisstore.New(ctx, cfg.Store.Redis, redisstore.Options{Reg: reg, Log: log.With("store", "redis")})
	case config.StoreGossip:
		return gossip.New(ctx, cfg.Store.Gossip, gossip.Options{
			Reg: reg, Log: log, KubeClient: deps.Kube,
			Namespace: deps.Namespace, NodeName: deps.PodName, PodIP: deps.PodIP, Limits: limits,
		})
	default:
		return nil, fmt.Errorf("store.backend: unknown backend %q", cfg.Store.Backend)
	}
}

// newSource builds a pool's discovery: static backends (behind their
// health checks, when configured) or Kubernetes pods.
func (s *Server) newSource(pc *config.Pool, deps Deps, log *slog.Logger) (discovery.Source, error) {
	reg := s.reg
	if len(pc.Backends.Static) > 0 {
		static := discovery.NewStatic(pc.Backends.Static)
		hc := pc.Backends.HealthCheck
		if hc == nil {
			return static, nil
		}
		// Checks have a transport of their own, which dials the configured
		// backends only (the proxy's guard admits healthy ones alone).
		t := proxy.NewTransport(proxy.TransportOptions{DialTimeout: s.cfg.Proxy.DialTimeout.Duration, Allowed: static.Current().HasAddr})
		s.closers = append(s.closers, t.CloseIdleConnections)
		return healthcheck.New(healthcheck.Options{
			Backends: static, Config: *hc, Client: &http.Client{Transport: t},
			Reg: prometheus.WrapRegistererWith(prometheus.Labels{"pool": pc.Name}, reg), Log: log.With("pool", pc.Name),
		}), nil
	}
	if deps.Kube == nil {
		return nil, fmt.Errorf("pools[%s].backends: kubernetes discovery needs a Kubernetes client", pc.Name)
	}
	// One gauge series per pool: the source registers without a pool label.
	preg := prometheus.WrapRegistererWith(prometheus.Labels{"pool": pc.Name}, reg)
	src, err := kube.NewSource(deps.Kube, pc.Backends, deps.Namespace, preg, log.With("pool", pc.Name))
	if err != nil {
		return nil, fmt.Errorf("pools[%s].backends: %w", pc.Name, err)
	}
	return src, nil
}

// newClaimReader builds the JWT verifier when the config has a jwt block.
func newClaimReader(cfg *config.Config, reg prometheus.Registerer, log *slog.Logger) (*jwtauth.Verifier, error) {
	if cfg.JWT == nil {
		return nil, nil
	}
	return jwtauth.New(cfg.JWT, reg, log)
}
