// Command tether-sidecar is the localhost reverse proxy beside a router
// replica: it pins every request of a session to one model-server backend
// (or prefill/decode pair) and shares those bindings with the other
// replicas. See the README for the configuration contract.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/tetherproxy/tether/sidecar/buildinfo"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/gcfloor"
	"github.com/tetherproxy/tether/sidecar/kubeclient"
	"github.com/tetherproxy/tether/sidecar/logbuf"
	"github.com/tetherproxy/tether/sidecar/logjson"
	"github.com/tetherproxy/tether/sidecar/logsink"
	"github.com/tetherproxy/tether/sidecar/server"
	"github.com/tetherproxy/tether/sidecar/sysmon"
	"github.com/tetherproxy/tether/sidecar/threads"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tether-sidecar:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		configPath = flag.String("config", "", "config file (YAML or JSON); without it the env var TETHER_CONFIG holds the document")
		kubeconfig = flag.String("kubeconfig", "", "kubeconfig file; default: in-cluster config (only used by kubernetes discovery)")
		logLevel   = flag.String("log-level", "info", "debug, info, warn or error")
		logFlush   = flag.Duration("log-flush-interval", 100*time.Millisecond, "log lines (the access log's included) are written in batches of up to 64 KiB, at most this long after the first of a batch; 0 writes every line at once")
		check      = flag.Bool("check", false, "validate the config and exit")
		sleep      = flag.Duration("sleep", 0, "sleep this long, then exit 0, and do nothing else: the preStop hook of a plain-container sidecar (the image has no shell)")
		version    = flag.Bool("version", false, "print the version and exit")
	)
	flag.Parse()
	if *version {
		fmt.Println("tether-sidecar", buildinfo.Get())
		return nil
	}
	if *sleep > 0 {
		time.Sleep(*sleep)
		return nil
	}
	// Before anything starts: an exec replaces the process (package sysmon).
	awakeErr := sysmon.KeepAwake()
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	// A LevelVar, so PUT /debug/loglevel changes the level at run time.
	levelVar := new(slog.LevelVar)
	levelVar.Set(level)
	// Batched: one write(2) per request costs more CPU than the request.
	// Stderr on Go's poller when a pipe, so a slow log reader parks the
	// writer instead of holding a thread (package logsink).
	sink := logsink.Stderr()
	if sink != os.Stderr {
		defer sink.Close()
	}
	out := logbuf.New(sink, logBufferBytes, *logFlush)
	defer out.Close()
	// slog's JSON lines, the access log's formatted without reflection.
	// Warnings and errors are written at once; access lines in batches.
	log := slog.New(logbuf.FlushAt(logjson.New(out, &slog.HandlerOptions{Level: levelVar}), out, slog.LevelWarn))

	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	if *check {
		// Only the verdict: scripts compare this output.
		fmt.Println("config ok")
		return nil
	}
	runtime.GOMAXPROCS(maxProcs(os.Getenv("GOMAXPROCS"), runtime.GOMAXPROCS(0)))
	if awakeErr != nil {
		log.Warn("go runtime: could not re-execute with GODEBUG="+sysmon.GODEBUG+"; the runtime's monitor keeps Go's default deep sleep, which costs CPU per request", "error", awakeErr)
	}
	// Unless GOMAXPROCS is set, one thread while one keeps up (package threads).
	adaptive := os.Getenv("GOMAXPROCS") == "" && runtime.GOMAXPROCS(0) > 1
	// Unless GOGC is set, a heap goal with room for 500 ms of allocation,
	// at most 32 MiB (package gcfloor).
	gcFloor := os.Getenv("GOGC") == ""
	log.Info("go runtime", "gomaxprocs", runtime.GOMAXPROCS(0), "adaptive", adaptive, "gcFloor", gcFloor, "gomemlimit", debug.SetMemoryLimit(-1), "godebug", os.Getenv("GODEBUG"))
	// The pod's identity, from the downward API; the only place that reads it.
	deps := server.Deps{Namespace: os.Getenv("POD_NAMESPACE"), PodName: os.Getenv("POD_NAME"), PodIP: os.Getenv("POD_IP"), LogLevel: levelVar}
	if deps.PodName == "" {
		deps.PodName, _ = os.Hostname()
	}
	if needsKube(cfg) {
		if deps.Kube, err = kubeclient.New(*kubeconfig, "tether-sidecar"); err != nil {
			return err
		}
	}
	if needsDynamic(cfg) {
		if deps.Dynamic, err = kubeclient.NewDynamic(*kubeconfig, "tether-sidecar"); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv, err := server.New(ctx, cfg, log, deps)
	if err != nil {
		return err
	}
	if err := srv.Listen(); err != nil {
		return err
	}
	// A log reader that falls behind costs log lines, never requests
	// (package logbuf): counted, and said in a warning every 10 s.
	go logbuf.ReportDrops(ctx, out, logbuf.ReportOptions{Log: log, Registerer: srv.Registry(), Every: 10 * time.Second})
	if adaptive {
		go threads.Run(ctx, threads.Options{Max: runtime.GOMAXPROCS(0), Registerer: srv.Registry(), Log: log})
	}
	if gcFloor {
		go gcfloor.Run(ctx, gcfloor.Options{Registerer: srv.Registry()})
	}
	return srv.Run(ctx)
}

// defaultMaxProcs is how many threads run Go code unless GOMAXPROCS says
// otherwise. A sidecar shares its node with the router it serves and, on
// a GPU node, with dozens of cores it should not spread over (every extra
// P adds cross-thread wake-ups per request, and GC workers): like Istio's
// proxy (concurrency 2 by default), it runs on two at most, and on one
// while one keeps up (package threads). Go's own default never goes
// below two, whatever the CPU limit.
const defaultMaxProcs = 2

// maxProcs is the GOMAXPROCS to run with: the environment's when set (Go
// has applied it already), else Go's own choice capped at defaultMaxProcs.
func maxProcs(env string, current int) int {
	if env != "" {
		return current
	}
	return min(current, defaultMaxProcs)
}

// logBufferBytes is the most log output held before it is written
// (about 200 access-log lines).
const logBufferBytes = 64 << 10

func loadConfig(path string) (*config.Config, error) {
	if path != "" {
		return config.Load(path)
	}
	doc := os.Getenv("TETHER_CONFIG")
	if doc == "" {
		return nil, errors.New("no config: pass --config FILE or set TETHER_CONFIG")
	}
	return config.Parse([]byte(doc))
}

// needsKube reports whether any part reads the Kubernetes API.
func needsKube(cfg *config.Config) bool {
	if g := cfg.Store.Gossip; cfg.Store.Backend == config.StoreGossip && g != nil && g.Discovery == config.PeersKubernetes {
		return true
	}
	for _, p := range cfg.Pools {
		if p.Backends.Kubernetes != nil || p.Backends.IsPD() || p.Backends.ModelServer != nil {
			return true
		}
	}
	return false
}

// needsDynamic reports whether a pool is defined by a ModelServer (a
// custom resource, read with the dynamic client).
func needsDynamic(cfg *config.Config) bool {
	for _, p := range cfg.Pools {
		if p.Backends.ModelServer != nil {
			return true
		}
	}
	return false
}
