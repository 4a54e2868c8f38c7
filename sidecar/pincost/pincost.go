// Package pincost estimates what keeping a session on its backend is
// worth, in the unit a user feels: the expected time to its first token.
// A kept pin costs the pinned backend's queue wait plus the prefill of the
// part of the prompt its prefix cache does not hold (the new turn); a move
// costs another backend's queue wait plus the prefill of the whole prompt.
// Soft affinity's cost policy moves a session when another backend is
// expected faster by a margin (README "Affinity policy").
//
// Everything it needs it learns from the responses the sidecar relays
// (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens, the
// time to the response headers, the request's duration), per pool, as
// exponentially weighted means, so its memory is constant. A prefill rate
// may be configured instead of learned.
package pincost

import (
	"math"
	"sync"
	"time"
)

// Defaults before anything was learned.
const (
	// DefaultPrefillTokensPerSecond is a mid-size model on one modern GPU
	// (an 8B model prefills well over 10,000 tokens/s on an H100; a 70B
	// across a node, a few thousand).
	DefaultPrefillTokensPerSecond = 10000
	// defaultBytesPerToken converts a request body's size to prompt
	// tokens until responses taught the real ratio (English text and
	// JSON run at about 4 bytes per token).
	defaultBytesPerToken = 4
	// defaultHitRatio is the share of a kept pin's prompt expected to be
	// cached before any was reported: a turn's new text is typically a
	// few percent of a conversation.
	defaultHitRatio = 0.9
	// defaultService is the request duration assumed before one was seen.
	defaultService = time.Second
)

// weight is the EWMA weight of a new sample: about the last 20 samples
// count.
const weight = 0.05

// minPrefillSample is the fewest uncached tokens a turn must prefill for
// its time to headers to teach the prefill rate: below it, fixed
// per-request overheads dominate.
const minPrefillSample = 32

// Estimator is one pool's learned figures. Its zero value is not usable:
// New.
type Estimator struct {
	fixedRate float64 // configured tokens/s; 0: learned

	mu            sync.Mutex
	secPerToken   float64 // prefill seconds per uncached token; 0 until learned
	bytesPerToken float64 // request body bytes per prompt token
	hitRatio      float64 // cached/prompt of turns that kept their pin
	service       float64 // seconds a request takes, streaming included
}

// New returns an Estimator; prefillTokensPerSecond > 0 fixes the prefill
// rate instead of learning it.
func New(prefillTokensPerSecond float64) *Estimator {
	return &Estimator{
		fixedRate:     prefillTokensPerSecond,
		bytesPerToken: defaultBytesPerToken,
		hitRatio:      defaultHitRatio,
		service:       defaultService.Seconds(),
	}
}

// Turn is what one relayed response taught.
type Turn struct {
	BodyBytes    int   // the request body's size
	PromptTokens int64 // usage.prompt_tokens
	CachedTokens int64 // usage.prompt_tokens_details.cached_tokens
	HasCached    bool  // the backend reports cached tokens
	Kept         bool  // the turn went to the session's pinned backend (a hit)
	// FirstToken is the time to a stream's first token (queue +
	// prefill); 0 for a whole response, whose time includes its decode.
	FirstToken time.Duration
	Duration   time.Duration // the whole request
	// Queued says the backend had requests waiting when the turn was
	// sent: its time to headers includes a queue and says nothing of
	// the prefill rate.
	Queued bool
}

// Learn folds one turn into the pool's figures.
func (e *Estimator) Learn(t Turn) {
	if t.PromptTokens <= 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if t.BodyBytes > 0 {
		e.bytesPerToken = ewma(e.bytesPerToken, float64(t.BodyBytes)/float64(t.PromptTokens))
	}
	if t.Duration > 0 {
		e.service = ewma(e.service, t.Duration.Seconds())
	}
	if !t.HasCached {
		return
	}
	if t.Kept {
		e.hitRatio = ewma(e.hitRatio, float64(t.CachedTokens)/float64(t.PromptTokens))
	}
	if uncached := t.PromptTokens - t.CachedTokens; !t.Queued && uncached >= minPrefillSample && t.FirstToken > 0 {
		s := t.FirstToken.Seconds() / float64(uncached)
		if e.secPerToken == 0 {
			e.secPerToken = s
		} else {
			e.secPerToken = ewma(e.secPerToken, s)
		}
	}
}

func ewma(old, sample float64) float64 { return old + weight*(sample-old) }

// Load is a backend's queue: requests waiting and running (scraped), and
// how late this replica's requests to it are (balance.Balancer.Behind).
type Load struct {
	Waiting, Running float64
	Behind           time.Duration
}

// queueWait is the expected wait before a request sent now starts on a
// backend: each of its running slots frees about once per service time,
// and the waiting requests go first; or, when longer, how late the
// backend's unanswered requests already are (a long prefill holding its
// compute delays requests that hold a running slot: they wait without
// being counted as waiting).
func (e *Estimator) queueWait(l Load) float64 {
	return math.Max(l.Waiting*e.service/math.Max(l.Running, 1), l.Behind.Seconds())
}

// QueueWait is queueWait for callers comparing backends.
func (e *Estimator) QueueWait(l Load) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return seconds(e.queueWait(l))
}

// Prefill is the expected prefill time of a request whose body is
// bodyBytes long: of its uncached part when kept on its pinned backend
// (whose cache holds all but the new turn), of the whole prompt
// otherwise. The expected time to its headers, with no queue.
func (e *Estimator) Prefill(bodyBytes int, kept bool) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	prompt := float64(bodyBytes) / e.bytesPerToken
	if kept {
		prompt *= 1 - e.hitRatio
	}
	return seconds(prompt * e.prefillRate())
}

func (e *Estimator) prefillRate() float64 {
	switch {
	case e.fixedRate > 0:
		return 1 / e.fixedRate
	case e.secPerToken > 0:
		return e.secPerToken
	}
	return 1.0 / DefaultPrefillTokensPerSecond
}

// Estimate is the expected time to first token of a turn, kept on its
// pinned backend or moved to another.
type Estimate struct {
	Keep, Move time.Duration
}

// Compare estimates a turn whose request body is bodyBytes long: kept on
// a backend loaded pinned (whose cache holds the conversation unless
// cold), or moved to one loaded other (whose cache holds nothing of it).
func (e *Estimator) Compare(bodyBytes int, pinned, other Load, cold bool) Estimate {
	e.mu.Lock()
	defer e.mu.Unlock()
	prompt := float64(bodyBytes) / e.bytesPerToken
	hit := e.hitRatio
	if cold {
		hit = 0
	}
	s := e.prefillRate()
	return Estimate{
		Keep: seconds(e.queueWait(pinned) + prompt*(1-hit)*s),
		Move: seconds(e.queueWait(other) + prompt*s),
	}
}

// Better reports whether moving is expected faster than keeping by more
// than margin (0.25: the move's time to first token is under 1/1.25 of
// the kept pin's).
func (est Estimate) Better(margin float64) bool {
	return float64(est.Keep) > (1+margin)*float64(est.Move)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Figures are the learned values, for /debug and tests.
type Figures struct {
	PrefillTokensPerSecond float64 `json:"prefillTokensPerSecond"`
	BytesPerToken          float64 `json:"bytesPerToken"`
	HitRatio               float64 `json:"hitRatio"`
	ServiceSeconds         float64 `json:"serviceSeconds"`
}

// Figures returns the values estimates use now.
func (e *Estimator) Figures() Figures {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Figures{
		PrefillTokensPerSecond: 1 / e.prefillRate(),
		BytesPerToken:          e.bytesPerToken,
		HitRatio:               e.hitRatio,
		ServiceSeconds:         e.service,
	}
}
