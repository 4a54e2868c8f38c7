package workload

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/session"
)

// BenchmarkHashedPlacementFootprint reports how unevenly tether's hashed
// placement spreads the default workload's tokens over 4 backends: the
// most any backend is given over the mean, for 1,000 random sets of
// backend addresses (the bench's backends listen on random ports), at
// the median and the 90th percentile. With every load equal the bound
// never bites, so this is the hash alone. README "Placement" quotes it:
//
//	go test -run '^$' -bench HashedPlacementFootprint -benchtime 1x ./e2e/bench/workload/
func BenchmarkHashedPlacementFootprint(b *testing.B) {
	convs := Generate(Defaults)
	const backends, sets = 4, 1000
	var ratios []float64
	for b.Loop() {
		r := rand.New(rand.NewPCG(1, 2))
		ratios = ratios[:0]
		for range sets {
			cands := make([]discovery.Backend, backends)
			for i := range cands {
				cands[i].ID = fmt.Sprintf("127.0.0.1:%d", 12000+r.IntN(16000))
			}
			bal := balance.New(balance.WithHashPlacement(balance.DefaultHashEpsilon))
			tokens := map[string]float64{}
			var total float64
			for _, c := range convs {
				be, ok := bal.Place(session.StoreKey("bench", c.ID), cands, nil)
				if !ok {
					b.Fatal("no backend placed")
				}
				for _, t := range c.Turns {
					tokens[be.ID] += float64(t.UserTokens + t.AnswerTokens)
					total += float64(t.UserTokens + t.AnswerTokens)
				}
			}
			var most float64
			for _, v := range tokens {
				most = max(most, v)
			}
			ratios = append(ratios, most/(total/backends))
		}
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "max/mean-p50")
	b.ReportMetric(ratios[len(ratios)*9/10], "max/mean-p90")
}
