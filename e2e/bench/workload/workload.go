// Package workload generates and drives the multi-turn conversations of
// the stickiness benchmark: N conversations that share one system prompt,
// each turn resending the whole history (user text and the model's
// answers) plus a new user message, turns separated by think time,
// conversation lengths skewed (many short, a few long). Everything is
// drawn from one seed, so every policy serves the very same requests.
package workload

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Params shape the workload. The defaults are documented in the flags.
type Params struct {
	Conversations int
	Ramp          time.Duration // conversations start uniformly over this window
	SystemTokens  int           // the shared system prompt
	TurnsMedian   float64       // turns per conversation: log-normal, this median …
	TurnsSigma    float64       // … and spread (σ of the log)
	TurnsMax      int
	UserMedian    int // tokens of a user message: log-normal, σ 0.6, at most 8×
	AnswerMedian  int // output tokens of an answer: log-normal, σ 0.5, at most 4×
	ThinkMean     time.Duration
	ThinkMax      time.Duration
	// StreamTokens caps the tokens actually streamed per answer (one SSE
	// event each). The history still gets the answer's full length and
	// the client waits out the rest of its decode time, so prompts and
	// pacing are those of full answers at a fraction of the events.
	StreamTokens int
	Decode       time.Duration // the model's time per output token, for that wait
	Seed         uint64
}

// Defaults are the full benchmark's workload: retrieval-augmented chat
// (a system prompt of a few paragraphs of instructions, user turns that
// carry retrieved passages), so prompts grow to several thousand tokens
// and the simulated GPU's prefill, not the machine's CPU, decides the
// time to first token; conversations arrive fast enough that a policy
// which recomputes what another would find cached queues on prefill, as
// a fleet sized to its traffic does (the report's section 2 says why).
var Defaults = Params{
	Conversations: 150, Ramp: 15 * time.Second, SystemTokens: 400,
	TurnsMedian: 4, TurnsSigma: 0.8, TurnsMax: 12,
	UserMedian: 400, AnswerMedian: 150,
	ThinkMean: time.Second, ThinkMax: 3 * time.Second, StreamTokens: 4, Seed: 1,
}

// Register adds the workload's flags, with d's values as defaults.
func (p *Params) Register(fs *flag.FlagSet, d Params) {
	fs.IntVar(&p.Conversations, "conversations", d.Conversations, "conversations (sessions)")
	fs.DurationVar(&p.Ramp, "ramp", d.Ramp, "conversations start uniformly over this window")
	fs.IntVar(&p.SystemTokens, "system-tokens", d.SystemTokens, "tokens of the system prompt all conversations share")
	fs.Float64Var(&p.TurnsMedian, "turns-median", d.TurnsMedian, "median turns per conversation (log-normal: many short, a few long)")
	fs.Float64Var(&p.TurnsSigma, "turns-sigma", d.TurnsSigma, "spread of the turns per conversation (σ of the log)")
	fs.IntVar(&p.TurnsMax, "turns-max", d.TurnsMax, "most turns of one conversation")
	fs.IntVar(&p.UserMedian, "user-tokens", d.UserMedian, "median tokens of a user message (log-normal, σ 0.6)")
	fs.IntVar(&p.AnswerMedian, "answer-tokens", d.AnswerMedian, "median output tokens of an answer (log-normal, σ 0.5)")
	fs.DurationVar(&p.ThinkMean, "think", d.ThinkMean, "mean think time between a conversation's turns (exponential)")
	fs.DurationVar(&p.ThinkMax, "think-max", d.ThinkMax, "longest think time")
	fs.IntVar(&p.StreamTokens, "stream-tokens", d.StreamTokens, "tokens streamed per answer (the rest of its decode time is waited, its text still joins the history)")
	fs.Uint64Var(&p.Seed, "seed", d.Seed, "random seed of the workload")
}

// String is the parameters as the flags that reproduce them.
func (p Params) String() string {
	return fmt.Sprintf("-conversations %d -ramp %v -system-tokens %d -turns-median %g -turns-sigma %g -turns-max %d -user-tokens %d -answer-tokens %d -think %v -think-max %v -stream-tokens %d -seed %d",
		p.Conversations, p.Ramp, p.SystemTokens, p.TurnsMedian, p.TurnsSigma, p.TurnsMax, p.UserMedian, p.AnswerMedian, p.ThinkMean, p.ThinkMax, p.StreamTokens, p.Seed)
}

// Turn is one request of a conversation.
type Turn struct {
	Pick         uint32 // picks the router replica: Pick mod R (as a Service would, at random)
	UserTokens   int
	AnswerTokens int
	Think        time.Duration // pause after this turn's answer
}

// Conversation is one session.
type Conversation struct {
	ID    string
	Start time.Duration // after the run's start
	Turns []Turn
}

// Generate draws the conversations.
func Generate(p Params) []Conversation {
	r := rand.New(rand.NewPCG(p.Seed, 0x7e7e))
	logNormal := func(median, sigma float64, most int) int {
		v := int(math.Round(median * math.Exp(sigma*r.NormFloat64())))
		return min(max(v, 1), most)
	}
	out := make([]Conversation, p.Conversations)
	for i := range out {
		c := &out[i]
		c.ID = fmt.Sprintf("conv-%d-%04d", p.Seed, i)
		c.Start = time.Duration(r.Float64() * float64(p.Ramp))
		n := logNormal(p.TurnsMedian, p.TurnsSigma, p.TurnsMax)
		for range n {
			c.Turns = append(c.Turns, Turn{
				Pick:         r.Uint32(),
				UserTokens:   logNormal(float64(p.UserMedian), 0.6, 8*p.UserMedian),
				AnswerTokens: logNormal(float64(p.AnswerMedian), 0.5, 4*p.AnswerMedian),
				Think:        min(time.Duration(r.ExpFloat64()*float64(p.ThinkMean)), p.ThinkMax),
			})
		}
	}
	return out
}

// Summary describes the generated workload in numbers.
func Summary(convs []Conversation, p Params) string {
	var turns, maxTurns, prompt int
	for _, c := range convs {
		turns += len(c.Turns)
		maxTurns = max(maxTurns, len(c.Turns))
		hist := p.SystemTokens
		for _, t := range c.Turns {
			hist += t.UserTokens
			prompt += hist
			hist += t.AnswerTokens
		}
	}
	return fmt.Sprintf("%d conversations, %d requests (turns per conversation: mean %.1f, at most %d), %d prompt tokens in all",
		len(convs), turns, float64(turns)/float64(max(len(convs), 1)), maxTurns, prompt)
}

// words returns n whitespace-separated tokens (modelsim's tokenizer
// splits on whitespace): tag, then the base-36 positions 1 … n-1. The tag
// makes the message distinct from every other conversation's, and since
// the prefix cache chains every block's hash to the blocks before it, so
// is everything after it; the short positions keep a token to 2-3 bytes,
// so that long prompts cost the machine's CPU little beside the simulated
// GPU's time.
func words(tag string, n int) string {
	var b strings.Builder
	b.Grow(len(tag) + 4*n)
	for i := range n {
		if i == 0 {
			b.WriteString(tag)
			continue
		}
		b.WriteByte(' ')
		b.WriteString(strconv.FormatInt(int64(i), 36))
	}
	return b.String()
}

// Footprint is what the conversations put in front of a cache: the
// share of all prompt tokens that is the shared system prompt, and the
// distinct tokens of all conversations (each one's longest history, the
// system prompt once).
func Footprint(convs []Conversation, p Params) (systemShare float64, distinct int) {
	var prompt, system int
	distinct = p.SystemTokens
	for _, c := range convs {
		hist := 0
		for _, t := range c.Turns {
			hist += t.UserTokens
			prompt += p.SystemTokens + hist
			system += p.SystemTokens
			hist += t.AnswerTokens
		}
		distinct += hist
	}
	return float64(system) / float64(max(prompt, 1)), distinct
}
