// Command bench runs tether's benchmarks side by side with what users run
// instead, and writes the report. See README "Benchmarks".
//
//	go run ./e2e/bench all [-quick] [-out e2e/bench] [-readme README.md]
//	go run ./e2e/bench hop [-rates 2000,5000] …    section 1, the cost of one hop (make bench-hop)
//	go run ./e2e/bench sticky …                  section 2, what stickiness is worth
//	go run ./e2e/bench scale …                   section 3, the stores at scale
//	go run ./e2e/bench affinity [-duration 30s]  affinity policies under cache pressure (make bench-affinity)
//	go run ./e2e/bench router -policy P -listen A -backends B,…  one of section 2's routers as a process (section 1's Go ReverseProxy row)
//	go run ./e2e/bench relay -listen A -backends B,…              a Go TCP relay, no HTTP (section 1's floor of a Go proxy)
//	go run ./e2e/bench minproxy -listen A -backends B,…           the least sticky HTTP proxy in Go (the floor of a Go HTTP proxy)
//	go run ./e2e/bench layerproxy -listen A -backends B,…         tether's work on tether's server and transport, without its handler
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "all":
		err = allMain(ctx, args)
	case "hop":
		err = hopMain(ctx, args)
	case "sticky":
		err = stickyMain(ctx, args)
	case "scale":
		err = scaleMain(ctx, args)
	case "affinity":
		err = affinityMain(ctx, args)
	case "router":
		err = routerMain(ctx, args)
	case "relay":
		err = relayMain(ctx, args)
	case "minproxy":
		err = minproxyMain(ctx, args)
	case "layerproxy":
		err = layerproxyMain(ctx, args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: bench <command> [flags]   (bench <command> -h lists the flags)
  all       sections 1-3; writes REPORT.md, its charts and the README's headline table
            (-quick: every section reduced, affinity included, for CI)
  hop       section 1: what one proxy hop costs (direct, tether, HAProxy, nginx)
  sticky    section 2: what stickiness is worth (policies × router replicas × backends)
  scale     section 3: the stores at scale (bytes per binding, lookups, convergence, join)
  affinity  round robin, hard, threshold and cost soft affinity, oracle, under cache pressure
  router    serve one of section 2's routing policies (a Go net/http ReverseProxy) until stopped
  relay     serve a Go TCP relay (each connection pinned to a backend, no HTTP) until stopped
  minproxy  serve the least sticky HTTP/1.1 proxy in Go (heads as bytes, no header map) until stopped
  layerproxy  serve tether's per-request work on tether's own server and transport, without its handler, until stopped`)
	os.Exit(2)
}
