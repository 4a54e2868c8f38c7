// Command tether-injector is the mutating admission webhook that puts the
// tether sidecar into router pods. See the README and `tether-injector -h`;
// `tether-injector inject` and `tether-injector check` are its offline
// injection and its install check.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tetherproxy/tether/injector/app"
	"github.com/tetherproxy/tether/injector/cli"
	"github.com/tetherproxy/tether/sidecar/buildinfo"
)

func main() {
	// Subcommands (inject, check); without one it serves the webhook.
	if code, ok := cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); ok {
		os.Exit(code)
	}
	flag.CommandLine.Usage = cli.WebhookUsage(flag.CommandLine)
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tether-injector:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg app.Config
	cfg.RegisterFlags(flag.CommandLine, os.Getenv("POD_NAMESPACE"))
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println("tether-injector", buildinfo.Get())
		return nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a, err := app.New(cfg, nil, log, reg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return a.Run(ctx)
}
