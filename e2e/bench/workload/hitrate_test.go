package workload

import (
	"container/heap"
	"container/list"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/balance"
	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/session"
)

// BenchmarkBoundedPlacementHitRate replays the default workload against a
// model of `make bench`'s backends, a prefix cache each (LRU over 16-token
// blocks, 4,096 of them), and reports the share of prompt tokens found
// cached when a conversation's first turn is placed by
//
//   - hash: tether's hash with its load bound only (requests arriving one
//     at a time never reach it), as before the bindings bound;
//   - bound: the hash bounded by live bindings at the default ε, as the
//     gossip store counts them;
//   - bound+work: bounded by bindings and by recent request bytes at the
//     default ε, each of three router replicas counting the requests it
//     forwards (a third of them, at random, as behind a Service);
//   - least-inflight: the backend with the fewest requests in flight,
//     which is what the bench's oracle does.
//
// Later turns go where the first went. A turn takes its answer's decode
// time (6 ms a token; the prefill is an order of magnitude shorter), then
// its think time. The figures are means over 20 random sets of backend
// addresses (the bench's backends listen on random ports, which the hash
// mixes in), and the worst of those sets, at 4 backends and at 8 with
// twice the conversations, as `make bench` scales them:
//
//	go test -run '^$' -bench BoundedPlacementHitRate -benchtime 1x ./e2e/bench/workload/
func BenchmarkBoundedPlacementHitRate(b *testing.B) {
	for _, backends := range []int{4, 8} {
		p := Defaults
		p.Conversations = Defaults.Conversations * backends / 4
		convs := Generate(p)
		b.Run(fmt.Sprintf("B=%d", backends), func(b *testing.B) {
			const sets = 20
			mean, worst := map[placement]float64{}, map[placement]float64{}
			for b.Loop() {
				clear(mean)
				for _, pl := range placements {
					worst[pl] = 1
				}
				r := rand.New(rand.NewPCG(1, 2))
				for range sets {
					ids := make([]string, backends)
					for i := range ids {
						ids[i] = fmt.Sprintf("127.0.0.1:%d", 12000+r.IntN(16000))
					}
					for _, pl := range placements {
						h := replayHitRate(convs, p, ids, pl)
						mean[pl] += h / sets
						worst[pl] = min(worst[pl], h)
					}
				}
			}
			for _, pl := range placements {
				b.ReportMetric(100*mean[pl], string(pl)+"-hit%")
				b.ReportMetric(100*worst[pl], string(pl)+"-worst-hit%")
			}
		})
	}
}

type placement string

const (
	placeHash          placement = "hash"
	placeBound         placement = "bound"
	placeWork          placement = "bound+work"
	placeLeastInflight placement = "least-inflight"
)

var placements = []placement{placeHash, placeBound, placeWork, placeLeastInflight}

// modelReplicas is how many router replicas share the requests under
// placeWork, each counting the work of those it forwards.
const modelReplicas = 3

const (
	modelBlockTokens = 16
	modelCacheBlocks = 4096
	modelDecode      = 6 * time.Millisecond
	// modelBytesPerToken turns a prompt's tokens into its request body's
	// bytes, which the work bound counts (a token is a word of a few
	// letters; the scale cancels out of the bound).
	modelBytesPerToken = 4
)

// modelTTL is how long a binding outlives its conversation's last answer.
var modelTTL = 300 * time.Second

// replayHitRate plays convs over backends ids under pl and returns the
// cached share of all prompt tokens.
func replayHitRate(convs []Conversation, p Params, ids []string, pl placement) float64 {
	cands := make([]discovery.Backend, len(ids))
	caches := make([]*blockLRU, len(ids))
	for i, id := range ids {
		cands[i] = discovery.Backend{ID: id}
		caches[i] = newBlockLRU(modelCacheBlocks)
	}
	index := func(id string) int {
		for i := range ids {
			if ids[i] == id {
				return i
			}
		}
		panic("unknown backend " + id)
	}
	inflight, live := make([]int, len(ids)), make([]int, len(ids))
	// The balancers age recent work by the replay's clock.
	var now time.Duration
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	opts := []balance.Option{balance.WithHashPlacement(balance.DefaultHashEpsilon),
		balance.WithClock(func() time.Time { return epoch.Add(now) })}
	if pl == placeBound || pl == placeWork {
		opts = append(opts, balance.WithBindingBound(balance.DefaultBindingEpsilon, func(want []string, n []int) {
			for j, id := range want {
				n[j] = live[index(id)]
			}
		}))
	}
	replicas := 1
	if pl == placeWork {
		opts = append(opts, balance.WithWorkBound(balance.DefaultWorkEpsilon))
		replicas = modelReplicas
	}
	bals := make([]*balance.Balancer, replicas)
	for i := range bals {
		bals[i] = balance.New(opts...)
	}
	ties := rand.New(rand.NewPCG(3, 4))

	on := make([]int, len(convs)) // each conversation's backend, -1 before its first turn
	history := make([]int, len(convs))
	var q events
	for i, c := range convs {
		on[i] = -1
		heap.Push(&q, event{at: c.Start, conv: i})
	}
	var prompt, cached int
	for q.Len() > 0 {
		e := heap.Pop(&q).(event)
		now = e.at
		c, t := &convs[e.conv], convs[e.conv].Turns[e.turn]
		if e.done {
			inflight[on[e.conv]]--
			history[e.conv] += t.AnswerTokens
			if e.turn+1 < len(c.Turns) {
				heap.Push(&q, event{at: e.at + t.Think, conv: e.conv, turn: e.turn + 1})
			} else {
				heap.Push(&q, event{at: e.at + modelTTL, conv: e.conv, turn: e.turn, expired: true})
			}
			continue
		}
		if e.expired {
			live[on[e.conv]]--
			continue
		}
		bal := bals[int(t.Pick)%replicas] // the replica the turn reaches
		if on[e.conv] < 0 {
			if pl == placeLeastInflight {
				on[e.conv] = leastOf(inflight, ties)
			} else {
				be, _ := bal.Place(session.StoreKey("bench", c.ID), cands, nil)
				on[e.conv] = index(be.ID)
			}
			live[on[e.conv]]++
		}
		history[e.conv] += t.UserTokens
		n := p.SystemTokens + history[e.conv]
		bal.Carry(ids[on[e.conv]], modelBytesPerToken*n)
		prompt += n
		cached += caches[on[e.conv]].prefix(e.conv, p.SystemTokens, n) * modelBlockTokens
		inflight[on[e.conv]]++
		heap.Push(&q, event{at: e.at + time.Duration(t.AnswerTokens)*modelDecode, conv: e.conv, turn: e.turn, done: true})
	}
	return float64(cached) / float64(prompt)
}

// leastOf is an index of v's least value, ties broken by r as the
// bench's oracle breaks them. (Taking the first of equals instead sends
// every conversation that starts while nothing is in flight to backend
// 0, which this model rewarded with 3 points of hit rate the oracle does
// not have.)
func leastOf(v []int, r *rand.Rand) int {
	best, ties := 0, 1
	for i := 1; i < len(v); i++ {
		switch {
		case v[i] < v[best]:
			best, ties = i, 1
		case v[i] == v[best]:
			if ties++; r.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// event is a turn's start, with done its answer's end, with expired its
// binding's expiry (a TTL after the last answer).
type event struct {
	at            time.Duration
	conv, turn    int
	done, expired bool
}

type events []event

func (q events) Len() int           { return len(q) }
func (q events) Less(i, j int) bool { return q[i].at < q[j].at }
func (q events) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)        { *q = append(*q, x.(event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// blockLRU is a prefix cache of whole blocks, least recently used out.
// A block is the system prompt's (conv -1, shared by all) or one
// conversation's.
type blockLRU struct {
	max    int
	order  *list.List
	blocks map[block]*list.Element
}

type block struct{ conv, i int }

func newBlockLRU(max int) *blockLRU {
	return &blockLRU{max: max, order: list.New(), blocks: map[block]*list.Element{}}
}

// prefix returns how many of the prompt's leading whole blocks conv's
// prompt of n tokens (system tokens first) finds cached, then caches all
// of them, as a model server does once the prompt is prefilled.
func (c *blockLRU) prefix(conv, system, n int) int {
	found, hit := 0, true
	for i := range n / modelBlockTokens {
		k := block{conv, i}
		if (i+1)*modelBlockTokens <= system {
			k.conv = -1
		}
		if el, ok := c.blocks[k]; ok {
			c.order.MoveToFront(el)
			if hit {
				found++
			}
			continue
		}
		hit = false
		c.blocks[k] = c.order.PushFront(k)
		if c.order.Len() > c.max {
			old := c.order.Back()
			delete(c.blocks, old.Value.(block))
			c.order.Remove(old)
		}
	}
	return found
}
