package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/tetherproxy/tether/e2e/bench/routers"
)

// routerMain serves one router of section 2 as a process of its own, so
// that section 1 can measure its CPU beside tether's: a plain
// net/http + httputil.ReverseProxy hop, the floor of any Go proxy.
func routerMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("router", flag.ExitOnError)
	policy := fs.String("policy", routers.ConsistentHash, "round-robin, least-outstanding, consistent-hash or oracle")
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	backends := fs.String("backends", "", "backends host:port, comma-separated")
	_ = fs.Parse(args)
	if *backends == "" {
		return fmt.Errorf("router: -backends is required")
	}
	g, err := routers.StartAt(*policy, strings.Split(*backends, ","), []string{*listen})
	if err != nil {
		return err
	}
	defer g.Close()
	fmt.Println("serving on", g.URLs()[0])
	<-ctx.Done()
	return nil
}
