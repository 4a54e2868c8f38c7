package scale

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/procs"
	"github.com/tetherproxy/tether/e2e/bench/table"
	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/store"
	"github.com/tetherproxy/tether/sidecar/store/memory"
)

// Options of the scale benchmark.
type Options struct {
	Bin        string
	Sizes      []int // binding counts for bytes per binding; the largest is also the join test's
	Rings      []int // ring sizes for convergence
	Samples    int   // convergence samples per ring size
	LookupTime time.Duration
	RedisN     int // bindings in Redis for its lookup rate
	RTSessions int // sessions of the round-trip count
	Step       func(string)
}

// Footprint is bytes per binding at one size.
type Footprint struct {
	Store    string
	Bindings int
	Bytes    float64
}

// Convergence is one ring size's time from a Create until all others hold it.
type Convergence struct {
	Nodes    int
	P50, P99 time.Duration
	Samples  int
}

// Results of the scale benchmark.
type Results struct {
	Opts        Options
	Footprints  []Footprint
	Lookups     map[string]float64 // lookups per CPU-second at the largest size (Redis: RedisN)
	RoundTrips  RoundTrips
	Convergence []Convergence
	Join        time.Duration // a new replica joining a ring with max(Sizes) bindings until it serves them
}

// Run measures everything in this process (and a redis-server and a
// sidecar for Redis).
func Run(ctx context.Context, o Options) (*Results, error) {
	step := func(s string) {
		if o.Step != nil {
			o.Step(s)
		}
	}
	res := &Results{Opts: o, Lookups: map[string]float64{}}
	sizes := slices.Sorted(slices.Values(o.Sizes))
	largest := sizes[len(sizes)-1]

	// Memory store: grow one store through the sizes; each step's bytes
	// per binding is measured on its own increment and cumulated.
	step(fmt.Sprintf("scale: memory store, %d bindings", largest))
	mem, err := memory.New(ctx, &config.MemoryStore{MaxEntries: 2 * largest}, memory.Options{})
	if err != nil {
		return nil, err
	}
	if err := footprints(res, "memory", mem, sizes); err != nil {
		return nil, err
	}
	if res.Lookups["memory"], err = lookups(mem, largest, o.LookupTime); err != nil {
		return nil, err
	}
	_ = mem.Close()
	mem = nil

	step(fmt.Sprintf("scale: gossip store, %d bindings, then a replica joins", largest))
	keyDir, err := os.MkdirTemp("", "tether-bench-ring-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(keyDir)
	keyFile, err := writeRingKey(keyDir)
	if err != nil {
		return nil, err
	}
	holder, err := startNode("bench-holder", "", keyFile, 2*largest)
	if err != nil {
		return nil, err
	}
	if err := footprints(res, "gossip", holder.Store, sizes); err != nil {
		holder.Close()
		return nil, err
	}
	if res.Lookups["gossip"], err = lookups(holder.Store, largest, o.LookupTime); err != nil {
		holder.Close()
		return nil, err
	}
	res.Join, err = join(holder, largest, keyFile)
	holder.Close()
	if err != nil {
		return nil, err
	}

	for _, n := range o.Rings {
		step(fmt.Sprintf("scale: gossip convergence, %d nodes", n))
		nodes, err := ring(n, keyFile)
		if err != nil {
			return nil, err
		}
		lat, err := convergence(nodes, o.Samples)
		closeNodes(nodes)
		if err != nil {
			return nil, fmt.Errorf("ring of %d: %w", n, err)
		}
		res.Convergence = append(res.Convergence, Convergence{Nodes: n, Samples: len(lat),
			P50: lat[len(lat)/2], P99: lat[min(len(lat)-1, len(lat)*99/100)]})
	}

	step("scale: Redis round trips and lookups")
	env, err := procs.NewEnv(o.Bin)
	if err != nil {
		return nil, err
	}
	defer env.Close()
	redis, addr, err := env.Redis("scale-redis")
	if err != nil {
		return nil, err
	}
	if res.RoundTrips, err = redisRoundTrips(env, addr, o.RTSessions, 4); err != nil {
		return nil, err
	}
	if res.Lookups["redis"], err = redisLookups(redis, addr, o.RedisN, o.LookupTime); err != nil {
		return nil, err
	}
	return res, ctx.Err()
}

func footprints(res *Results, name string, s store.Store, sizes []int) error {
	have, bytes := 0, 0.0
	for _, n := range sizes {
		per, err := fill(s, have, n)
		if err != nil {
			return err
		}
		bytes += per * float64(n-have)
		have = n
		res.Footprints = append(res.Footprints, Footprint{Store: name, Bindings: n, Bytes: bytes / float64(n)})
	}
	return nil
}

func lookups(s store.Store, n int, d time.Duration) (float64, error) {
	rate, misses, err := lookupRate(s, n, d, nil)
	if err == nil && misses > 0 {
		err = fmt.Errorf("%d lookups of existing bindings missed", misses)
	}
	return rate, err
}

// Tables returns the results as tables.
func (r *Results) Tables() []*table.Table {
	fp := &table.Table{Title: "memory per binding", Head: []string{"store", "bindings", "bytes/binding"}}
	for _, f := range r.Footprints {
		fp.Add(f.Store, fmt.Sprint(f.Bindings), fmt.Sprintf("%.0f", f.Bytes))
	}
	lk := &table.Table{Title: "lookup-and-refresh", Head: []string{"store", "bindings", "lookups per CPU-second", "Redis round trips, new session", "Redis round trips, sticky turn"}}
	largest := slices.Max(r.Opts.Sizes)
	lk.Add("memory", fmt.Sprint(largest), fmt.Sprintf("%.0f", r.Lookups["memory"]), "—", "—")
	lk.Add("gossip", fmt.Sprint(largest), fmt.Sprintf("%.0f", r.Lookups["gossip"]), "—", "—")
	lk.Add("redis (client + server CPU)", fmt.Sprint(r.Opts.RedisN), fmt.Sprintf("%.0f", r.Lookups["redis"]),
		fmt.Sprintf("%.2f", r.RoundTrips.NewSession), fmt.Sprintf("%.2f", r.RoundTrips.Sticky))
	cv := &table.Table{Title: "gossip convergence: a new binding on one node until every other node holds it",
		Head: []string{"nodes", "p50 ms", "p99 ms", "samples"}}
	for _, c := range r.Convergence {
		cv.Add(fmt.Sprint(c.Nodes), fmt.Sprintf("%.2f", float64(c.P50)/1e6), fmt.Sprintf("%.2f", float64(c.P99)/1e6), fmt.Sprint(c.Samples))
	}
	jn := &table.Table{Title: "a replica joining a ring", Head: []string{"bindings held by the ring", "until the new replica is synced and holds them all"}}
	jn.Add(fmt.Sprint(largest), fmt.Sprintf("%.1f s", r.Join.Seconds()))
	return []*table.Table{fp, lk, cv, jn}
}

// Print writes the tables as text.
func (r *Results) Print(w io.Writer) {
	for _, t := range r.Tables() {
		t.Text(w)
	}
}
