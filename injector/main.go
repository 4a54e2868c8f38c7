// Command tether-injector is the mutating admission webhook that puts the
// tether sidecar into router pods. See the README and `tether-injector -h`.
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
)

func main() {
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
		fmt.Println(app.Version)
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
