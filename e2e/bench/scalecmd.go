package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/scale"
)

// scaleFlags are section 3's parameters.
type scaleFlags struct {
	sizes, rings         string
	samples, redisN, rtN int
	lookupTime           time.Duration
}

var scaleDefaults = scaleFlags{sizes: "10000,100000,1000000", rings: "3,10,30", samples: 200,
	redisN: 100000, rtN: 200, lookupTime: 2 * time.Second}

func (s *scaleFlags) register(fs *flag.FlagSet, d scaleFlags) {
	fs.StringVar(&s.sizes, "sizes", d.sizes, "binding counts for bytes per binding (the largest is also the join test's)")
	fs.StringVar(&s.rings, "rings", d.rings, "gossip ring sizes for convergence")
	fs.IntVar(&s.samples, "samples", d.samples, "convergence samples per ring size")
	fs.IntVar(&s.redisN, "redis-bindings", d.redisN, "bindings in Redis for its lookup rate")
	fs.IntVar(&s.rtN, "rt-sessions", d.rtN, "sessions for the Redis round-trip count (1 new turn + 4 sticky turns each)")
	fs.DurationVar(&s.lookupTime, "lookup-time", d.lookupTime, "time of each lookup-rate measurement")
}

func (s *scaleFlags) String() string {
	return fmt.Sprintf("-sizes %s -rings %s -samples %d -redis-bindings %d -rt-sessions %d -lookup-time %v",
		s.sizes, s.rings, s.samples, s.redisN, s.rtN, s.lookupTime)
}

func (s *scaleFlags) options(bin string) (scale.Options, error) {
	o := scale.Options{Bin: bin, Samples: s.samples, RedisN: s.redisN, RTSessions: s.rtN, LookupTime: s.lookupTime}
	var err error
	if o.Sizes, err = parseInts("-sizes", s.sizes); err != nil {
		return o, err
	}
	o.Rings, err = parseInts("-rings", s.rings)
	return o, err
}

func scaleMain(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	bin := fs.String("bin", "bin", "directory with tether-sidecar and modelsim")
	var s scaleFlags
	s.register(fs, scaleDefaults)
	_ = fs.Parse(args)
	o, err := s.options(*bin)
	if err != nil {
		return err
	}
	o.Step = func(st string) { fmt.Fprintln(os.Stderr, "…", st) }
	res, err := scale.Run(ctx, o)
	if err != nil {
		return err
	}
	res.Print(os.Stdout)
	return nil
}
