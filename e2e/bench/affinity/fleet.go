package affinity

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tetherproxy/tether/e2e/modelsim/sim"
)

// StackHeader names the policy a request belongs to. Every policy has
// backends of its own (fresh caches and queues) at the same addresses,
// so that the sidecars' hashed placement (session key over backend
// addresses) starts each from the same spread of sessions: backend j of
// every policy is one listener, which hands a request to policy i's own
// modelsim server j by this header (the routers pass it on), and a load
// scrape by its path, /stack/i/metrics. (The policies run one after the
// other: all at once, the bench's own CPU demand, five times higher,
// starved it on a loaded 2-core machine into dial timeouts.)
const StackHeader = "X-Bench-Stack"

// fleet is the backends of every policy behind shared listeners.
type fleet struct {
	sims    [][]*sim.Server // [policy][backend]
	servers []*http.Server
	addrs   []string
}

// startFleet creates b.N modelsim servers for each of n policies and
// serves them on b.N loopback listeners.
func startFleet(b Backends, n int) (*fleet, error) {
	f := &fleet{sims: make([][]*sim.Server, n)}
	for i := range n {
		for j := range b.N {
			f.sims[i] = append(f.sims[i], sim.New(sim.Options{ID: fmt.Sprintf("sim-%d", j), MaxRunning: b.MaxRunning,
				PrefillPerToken: b.Prefill, DecodePerToken: b.Decode, CacheBlocks: b.CacheBlocks, SerialPrefill: true}))
		}
	}
	for j := range b.N {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.close()
			return nil, err
		}
		hs := &http.Server{Handler: f.backend(j), ReadHeaderTimeout: 10 * time.Second}
		go hs.Serve(ln)
		f.servers = append(f.servers, hs)
		f.addrs = append(f.addrs, ln.Addr().String())
	}
	return f, nil
}

// backend is the handler of listener j.
func (f *fleet) backend(j int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tag := r.Header.Get(StackHeader)
		if rest, ok := strings.CutPrefix(r.URL.Path, "/stack/"); ok {
			var path string
			tag, path, _ = strings.Cut(rest, "/")
			r.URL.Path = "/" + path
		}
		i, err := strconv.Atoi(tag)
		if err != nil || i < 0 || i >= len(f.sims) {
			http.Error(w, "no such bench stack", http.StatusNotFound)
			return
		}
		f.sims[i][j].ServeHTTP(w, r)
	})
}

func (f *fleet) close() {
	for _, hs := range f.servers {
		_ = hs.Close()
	}
}
