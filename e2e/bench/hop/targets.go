// Package hop measures what one proxy hop costs (the benchmarks' section
// 1): the same modelsim backends and the same open-loop load, sent direct
// and through tether (memory, Redis, gossip stores), HAProxy with a stick
// table and nginx with consistent hashing, all real processes on
// loopback, in turn and in one run, so that ratios hold on a noisy machine.
package hop

import (
	"fmt"
	"slices"

	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/sidecar/sysmon"
)

// Proxy names, in report order.
const (
	Direct       = "direct"
	HAProxy      = "haproxy"
	Nginx        = "nginx"
	Tether       = "tether"        // memory store, access log on
	TetherNoLog  = "tether-nolog"  // memory store, access log off
	TetherRedis  = "tether-redis"  // Redis store (a real redis-server)
	TetherGossip = "tether-gossip" // gossip store, a ring of three sidecars
	// TetherBaseline is another build of tether-sidecar
	// (Options.BaselineBinary), memory store, access log on: a change's
	// before and after, side by side in one run.
	TetherBaseline = "tether-baseline"
	// GoProxy is net/http's httputil.ReverseProxy and nothing else
	// (consistent hashing on the header): what any Go proxy pays for
	// the hop before doing anything of its own.
	GoProxy = "go-reverseproxy"
	// GoRelay is a Go TCP relay (each client connection pinned to one
	// backend, bytes copied both ways, no HTTP), run with the sidecar's
	// runtime settings (as GoProxy): the floor of a Go proxy on this
	// machine, below which tether cannot go without leaving Go's
	// goroutines and netpoller. Measured only when asked for.
	GoRelay = "go-relay"
	// GoMinimal is the least a sticky HTTP/1.1 proxy can do in Go (the
	// bench's minproxy command: heads forwarded as the bytes they came
	// in, the session header found in them, a map from session to
	// backend, pooled keep-alive connections; no header map, no timer,
	// log or metric), with the sidecar's runtime settings: the floor of
	// a Go HTTP proxy on this machine, between the relay and tether.
	// Measured only when asked for.
	GoMinimal = "go-minimal"
	// GoMinimalWork is GoMinimal doing tether's work for each request
	// besides proxying it (the minproxy command's -work: the store and its
	// key, the usage scan, metrics, the access log), the proxy tether
	// would be without the shape of its data path. GoMinimalWorkNoLog is
	// the same without the access log. Measured only when asked for.
	GoMinimalWork      = "go-minimal-work"
	GoMinimalWorkNoLog = "go-minimal-work-nolog"
	// GoLayersWork is tether's work on tether's own server and transport
	// (packages downstream and upstream: net/http's request and response
	// objects and header maps) without its handler (package proxy), the
	// bench's layerproxy command: between GoMinimalWork and tether, it
	// splits the cost of tether's data path shape in two.
	// GoLayersWorkNoLog is the same without the access log. Measured only
	// when asked for.
	GoLayersWork      = "go-layers-work"
	GoLayersWorkNoLog = "go-layers-work-nolog"
)

// AllProxies lists every proxy the section measures by default;
// TetherBaseline, which needs another build, and GoRelay, GoMinimal,
// GoMinimalWork(NoLog) and GoLayersWork(NoLog), references that do a
// proxy's least (and tether's work on it, on the least or on tether's
// server and transport), only when asked for.
var AllProxies = []string{Direct, HAProxy, Nginx, GoProxy, Tether, TetherNoLog, TetherRedis, TetherGossip}

// Labels are the names the tables print.
var Labels = map[string]string{
	Direct:             "direct (no proxy)",
	HAProxy:            "HAProxy stick table",
	Nginx:              "nginx consistent hash",
	GoProxy:            "Go httputil.ReverseProxy (hash)",
	Tether:             "tether (memory)",
	TetherNoLog:        "tether (memory, no access log)",
	TetherRedis:        "tether (Redis)",
	TetherGossip:       "tether (gossip, 3 replicas)",
	TetherBaseline:     "tether (memory), baseline build",
	GoRelay:            "Go TCP relay (no HTTP; floor)",
	GoMinimal:          "Go minimal sticky proxy (heads as bytes; floor of HTTP)",
	GoMinimalWork:      "Go minimal proxy + tether's per-request work",
	GoMinimalWorkNoLog: "Go minimal proxy + tether's per-request work, no access log",
	GoLayersWork:       "tether's server + transport + work, no handler",
	GoLayersWorkNoLog:  "tether's server + transport + work, no handler, no access log",
}

// workArgs are the bench proxies' -work arguments, by target: tether's
// per-request work with its access log or without.
var workArgs = map[string][]string{
	GoMinimalWork: {"-work", "log"}, GoMinimalWorkNoLog: {"-work", "nolog"},
	GoLayersWork: {"-work", "log"}, GoLayersWorkNoLog: {"-work", "nolog"},
}

// goEnv is the environment added to a Go proxy's: the sidecars' threads
// and, for the Go proxies that are not tether, the GODEBUG a sidecar
// re-executes itself with (README "Threads"), so that they run as it
// does; Options.GoDebug, if set, for all.
func (o *Options) goEnv(tether bool) []string {
	env := slices.Clone(o.SidecarEnv)
	if o.GoDebug != "" || !tether {
		env = append(env, o.goDebugEnv())
	}
	return env
}

// goDebugEnv is the GODEBUG of the Go processes that are not sidecars
// (the other Go proxies and the backends): Options.GoDebug, or the one a
// sidecar re-executes itself with.
func (o *Options) goDebugEnv() string {
	if o.GoDebug != "" {
		return "GODEBUG=" + o.GoDebug
	}
	return "GODEBUG=" + sysmon.GODEBUG
}

// target is where one proxy's load goes.
type target struct {
	name string
	url  string // the proxy's listener; empty for direct
	// admin is a tether sidecar's admin listener (its /metrics).
	admin string
	proc  *procs.Process   // the proxy measured; nil for direct
	aux   []*procs.Process // processes it needs besides (redis-server, ring peers)
}

// startTarget starts proxy name in front of backends.
func startTarget(o *Options, name string, backends []string) (*target, error) {
	env := o.Env
	t := &target{name: name}
	var first *procs.Running
	side := func(s procs.Sidecar) (err error) {
		s.Backends, s.Env, s.StderrPause = backends, o.goEnv(true), o.LogReaderPause
		if first, err = env.Sidecar(s); err != nil {
			return err
		}
		t.proc, t.url, t.admin = first.Process, "http://"+first.Addr, first.Admin
		return nil
	}
	switch name {
	case Direct:
		return t, nil
	case HAProxy:
		p, addr, err := env.HAProxy("haproxy", backends)
		t.proc, t.url = p, "http://"+addr
		return t, err
	case Nginx:
		p, addr, err := env.Nginx("nginx", backends)
		t.proc, t.url = p, "http://"+addr
		return t, err
	case GoProxy:
		p, addr, err := env.GoRouter("go-reverseproxy", "consistent-hash", backends, o.goEnv(false))
		t.proc, t.url = p, "http://"+addr
		return t, err
	case GoRelay:
		p, addr, err := env.GoRelay("go-relay", backends, o.goEnv(false))
		t.proc, t.url = p, "http://"+addr
		return t, err
	case GoMinimal, GoMinimalWork, GoMinimalWorkNoLog:
		p, addr, err := env.GoMinimal(name, backends, o.goEnv(false), workArgs[name]...)
		t.proc, t.url = p, "http://"+addr
		return t, err
	case GoLayersWork, GoLayersWorkNoLog:
		p, addr, err := env.GoLayers(name, backends, o.goEnv(false), workArgs[name]...)
		t.proc, t.url = p, "http://"+addr
		return t, err
	case Tether:
		return t, side(procs.Sidecar{Name: "tether-memory"})
	case TetherBaseline:
		if o.BaselineBinary == "" {
			return nil, fmt.Errorf("%s needs a baseline binary (bench hop -tether-baseline)", name)
		}
		return t, side(procs.Sidecar{Name: "tether-baseline", Binary: o.BaselineBinary})
	case TetherNoLog:
		return t, side(procs.Sidecar{Name: "tether-nolog", LogLevel: "warn"})
	case TetherRedis:
		rp, addr, err := env.Redis("redis")
		if err != nil {
			return nil, err
		}
		t.aux = append(t.aux, rp)
		return t, side(procs.Sidecar{Name: "tether-redis", Store: "redis", RedisAddr: addr})
	case TetherGossip:
		// The measured replica first; two peers join it, so its state
		// and its direct sends are those of a three-replica ring.
		if err := side(procs.Sidecar{Name: "tether-gossip-0", Store: "gossip"}); err != nil {
			return nil, err
		}
		seed := first.Gossip
		for i := 1; i < 3; i++ {
			r, err := env.Sidecar(procs.Sidecar{Name: fmt.Sprint("tether-gossip-", i), Store: "gossip",
				GossipJoin: []string{seed}, Backends: backends, Env: o.goEnv(true)})
			if err != nil {
				return nil, err
			}
			t.aux = append(t.aux, r.Process)
		}
		return t, nil
	}
	return nil, fmt.Errorf("unknown proxy %q (want one of %v, %s, %s, %s, %s, %s, %s or %s)", name, AllProxies, TetherBaseline, GoRelay, GoMinimal, GoMinimalWork, GoMinimalWorkNoLog, GoLayersWork, GoLayersWorkNoLog)
}
