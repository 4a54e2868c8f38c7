// Command modelsim is a simulated OpenAI/vLLM model server for demos, tests
// and benchmarks of tether: a prefix cache in token blocks, prefill time for
// uncached prompt tokens only, decode time per output token, and vLLM's
// metric names. See package sim for the model.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tetherproxy/tether/e2e/modelsim/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // after the first signal, a second one kills at once
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "modelsim:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down gracefully. It prints
// "modelsim <id> listening on <addr>" to stdout once listening.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("modelsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8001", "address to listen on (port 0 picks a free port); several, comma-separated, serve that many independent backends from one process")
	id := fs.String("id", "", "identity reported in X-Modelsim-Id and system_fingerprint (default: the listen address); with several --listen addresses, one per address, comma-separated")
	model := fs.String("model", sim.DefaultModel, "served model name")
	blockTokens := fs.Int("block-tokens", sim.DefaultBlockTokens, "prefix-cache block size in tokens")
	cacheBlocks := fs.Int("cache-blocks", sim.DefaultCacheBlocks, "prefix-cache capacity in blocks (LRU)")
	prefill := fs.Duration("prefill-per-token", time.Millisecond, "time per uncached prompt token")
	decode := fs.Duration("decode-per-token", 10*time.Millisecond, "time per output token")
	drain := fs.Duration("shutdown-timeout", 10*time.Second, "on SIGTERM/SIGINT, how long in-flight requests may finish before they are cut")
	maxRunning := fs.Int("max-running", sim.DefaultMaxRunning, "requests served at once; the rest wait in FIFO order")
	serial := fs.Bool("serial-prefill", false, "compute the prefills of all requests one at a time, as one GPU does (default: in parallel)")
	logRequests := fs.Bool("log-requests", true, "log a line per completion request (benchmarks that measure a proxy turn it off: at thousands of requests a second the lines cost the backends more CPU than their answers)")
	faultName := fs.String("fault", "none", "fail every completion request: none, reset (read it, reset the connection), hang (never answer) or error (503); POST /sim/fault?mode= changes it")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for name, v := range map[string]int{"block-tokens": *blockTokens, "cache-blocks": *cacheBlocks, "max-running": *maxRunning} {
		if v < 1 {
			return fmt.Errorf("--%s must be at least 1, got %d", name, v)
		}
	}
	if *prefill < 0 || *decode < 0 || *drain < 0 {
		return errors.New("--prefill-per-token, --decode-per-token and --shutdown-timeout must not be negative")
	}
	fault, err := sim.ParseFault(*faultName)
	if err != nil {
		return fmt.Errorf("--fault: %w", err)
	}

	addrs := strings.Split(*listen, ",")
	ids := make([]string, len(addrs))
	if *id != "" {
		if ids = strings.Split(*id, ","); len(ids) != len(addrs) {
			return fmt.Errorf("--id: %d ids for %d --listen addresses; give one per address", len(ids), len(addrs))
		}
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, a := range addrs {
		ln, err := net.Listen("tcp", strings.TrimSpace(a))
		if err != nil {
			return err
		}
		lns = append(lns, ln)
	}

	// Every listener is a backend of its own (its cache, lanes, counters
	// and metrics): one process can stand in for a fleet, which spares a
	// 2-core benchmark dozens of Go runtimes waking up beside the proxies
	// it measures.
	servers := make([]*http.Server, len(lns))
	logs := make([]*slog.Logger, len(lns))
	served := make(chan error, len(lns))
	for i, ln := range lns {
		addr := ln.Addr().String()
		if ids[i] == "" {
			ids[i] = addr
		}
		logs[i] = slog.New(slog.NewJSONHandler(stderr, nil)).With("modelsim", ids[i])
		reqLog := logs[i]
		if !*logRequests {
			reqLog = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("modelsim", ids[i])
		}
		s := sim.New(sim.Options{
			ID: ids[i], Model: *model, BlockTokens: *blockTokens, CacheBlocks: *cacheBlocks,
			PrefillPerToken: *prefill, DecodePerToken: *decode, MaxRunning: *maxRunning, Logger: reqLog,
			SerialPrefill: *serial, Fault: fault,
		})
		// No write timeout: streams last as long as their tokens take.
		servers[i] = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		go func() { served <- servers[i].Serve(ln) }()
		logs[i].Info("listening", "addr", addr, "model", *model, "block_tokens", *blockTokens, "cache_blocks", *cacheBlocks,
			"prefill_per_token", prefill.String(), "decode_per_token", decode.String(), "max_running", *maxRunning,
			"serial_prefill", *serial)
		// Tests of processes wait for this line (with --listen :0 it has the real port).
		fmt.Fprintf(stdout, "modelsim %s listening on %s\n", ids[i], addr)
	}
	lns = nil // the servers own them now

	select {
	case err := <-served:
		for _, srv := range servers {
			srv.Close()
		}
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() {
			logs[i].Info("shutting down")
			if err := srv.Shutdown(sctx); err != nil {
				logs[i].Warn("shutdown did not drain; closing", "err", err)
				errs[i] = srv.Close()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
