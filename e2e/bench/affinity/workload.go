package affinity

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Workload is the skewed multi-turn load: a few heavy agent sessions
// (a long, growing context; each turn a burst of parallel tool calls)
// and many short chats (a shared system prompt, a few turns separated
// by a user's think time). Token counts are modelsim tokens
// (whitespace-separated words); prompts are built so that n words are n
// tokens.
type Workload struct {
	Agents        int           // heavy agent sessions, running for the whole run
	AgentContext  int           // tokens of an agent's context at its first turn
	AgentGrowth   int           // tokens its context grows by per turn (tool results)
	Parallel      int           // requests of one agent turn, sent at once
	AgentTokens   int           // output tokens of an agent request
	AgentThink    time.Duration // an agent's pause between turns (running its tools)
	ChatEvery     time.Duration // a new chat starts this often
	SystemTokens  int           // the system prompt every chat shares
	ChatFirstMin  int           // tokens of a chat's first user message: uniform in [min, max]
	ChatFirstMax  int
	ChatTurnsMax  int           // turns of a chat: uniform in [2, max]
	ChatTurnAdded int           // tokens a later turn adds (the answer re-sent plus the next message)
	ChatTokens    int           // output tokens of a chat answer
	ChatThinkMin  time.Duration // a user's think time between turns: uniform in [min, max]
	ChatThinkMax  time.Duration
	// Another tenant's batch job on backend 0 (not routed by the
	// policies): every BatchEvery, for BatchFor, it takes BatchShare of
	// that backend's prefill compute. 0: none.
	BatchEvery time.Duration
	BatchFor   time.Duration
	BatchShare float64
	Seed       uint64
}

// Register adds the workload's flags, with d's values as defaults.
func (w *Workload) Register(fs *flag.FlagSet, d Workload) {
	fs.IntVar(&w.Agents, "agents", d.Agents, "heavy agent sessions")
	fs.IntVar(&w.AgentContext, "agent-context", d.AgentContext, "tokens of an agent's context at its first turn")
	fs.IntVar(&w.AgentGrowth, "agent-growth", d.AgentGrowth, "tokens an agent's context grows by per turn")
	fs.IntVar(&w.Parallel, "parallel", d.Parallel, "requests an agent turn sends at once (parallel tool calls)")
	fs.IntVar(&w.AgentTokens, "agent-tokens", d.AgentTokens, "output tokens of an agent request")
	fs.DurationVar(&w.AgentThink, "agent-think", d.AgentThink, "an agent's pause between turns (running its tools)")
	fs.DurationVar(&w.ChatEvery, "chat-every", d.ChatEvery, "a new chat starts this often")
	fs.IntVar(&w.SystemTokens, "system-tokens", d.SystemTokens, "tokens of the system prompt every chat shares")
	fs.IntVar(&w.ChatFirstMin, "chat-first-min", d.ChatFirstMin, "fewest tokens of a chat's first message")
	fs.IntVar(&w.ChatFirstMax, "chat-first-max", d.ChatFirstMax, "most tokens of a chat's first message")
	fs.IntVar(&w.ChatTurnsMax, "chat-turns-max", d.ChatTurnsMax, "most turns of a chat (at least 2)")
	fs.IntVar(&w.ChatTurnAdded, "chat-turn-tokens", d.ChatTurnAdded, "tokens each later chat turn adds")
	fs.IntVar(&w.ChatTokens, "chat-tokens", d.ChatTokens, "output tokens of a chat answer")
	fs.DurationVar(&w.ChatThinkMin, "chat-think-min", d.ChatThinkMin, "shortest think time between a chat's turns")
	fs.DurationVar(&w.ChatThinkMax, "chat-think-max", d.ChatThinkMax, "longest think time between a chat's turns")
	fs.DurationVar(&w.BatchEvery, "batch-every", d.BatchEvery, "another tenant's batch job starts on backend 0 this often (0: none)")
	fs.DurationVar(&w.BatchFor, "batch-for", d.BatchFor, "how long each batch job runs")
	fs.Float64Var(&w.BatchShare, "batch-share", d.BatchShare, "share of backend 0's prefill compute a batch job takes while it runs")
	fs.Uint64Var(&w.Seed, "seed", d.Seed, "random seed of the workload")
}

// sample is one request's outcome.
type sample struct {
	start time.Time
	ttft  time.Duration
	err   error
}

// driver sends the workload to the replicas until end: no turn starts
// after it, turns in flight finish. A session's turns, and an agent's
// parallel calls, go to the replicas in turn, so most of them reach a
// replica other than the one that bound the session.
type driver struct {
	w      Workload
	urls   []string
	tag    string // StackHeader
	client *http.Client
	// occupy holds backend 0's prefill lane (the batch tenant).
	occupy func(time.Duration)
	mu     sync.Mutex
	out    []sample
}

func (d *driver) record(s sample) { d.mu.Lock(); d.out = append(d.out, s); d.mu.Unlock() }

func (d *driver) run(start, end time.Time) []sample {
	var wg sync.WaitGroup
	for a := range d.w.Agents {
		wg.Go(func() { d.agent(a, end) })
	}
	if d.w.BatchEvery > 0 && d.occupy != nil {
		wg.Go(func() { d.batch(start, end) })
	}
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * d.w.ChatEvery)
		if !at.Before(end) {
			break
		}
		time.Sleep(time.Until(at))
		wg.Go(func() { d.chat(i, end) })
	}
	wg.Wait()
	return d.out
}

func (d *driver) agent(a int, end time.Time) {
	session := fmt.Sprintf("agent-%d", a)
	hist := []string{words(fmt.Sprintf("agent%d-context", a), d.w.AgentContext)}
	base := replicaBase(session)
	for turn := 0; time.Now().Before(end); turn++ {
		var calls sync.WaitGroup
		for c := range d.w.Parallel {
			msgs := append(slices.Clone(hist), words(fmt.Sprintf("a%d-t%d-call%d", a, turn, c), 20))
			url := d.urls[(base+turn*d.w.Parallel+c)%len(d.urls)]
			calls.Go(func() { d.record(d.send(url, session, msgs, d.w.AgentTokens)) })
		}
		calls.Wait()
		pause(d.w.AgentThink, end)
		hist = append(hist, words(fmt.Sprintf("a%d-t%d-result", a, turn), d.w.AgentGrowth))
	}
}

func (d *driver) chat(i int, end time.Time) {
	rng := rand.New(rand.NewPCG(d.w.Seed, uint64(i)))
	session := fmt.Sprintf("chat-%d", i)
	first := d.w.ChatFirstMin + rng.IntN(max(1, d.w.ChatFirstMax-d.w.ChatFirstMin+1))
	turns := 2 + rng.IntN(max(1, d.w.ChatTurnsMax-1))
	hist := []string{words("system", d.w.SystemTokens), words(fmt.Sprintf("chat%d", i), first)}
	base := replicaBase(session)
	for turn := range turns {
		if !time.Now().Before(end) {
			return
		}
		d.record(d.send(d.urls[(base+turn)%len(d.urls)], session, hist, d.w.ChatTokens))
		hist = append(hist, words(fmt.Sprintf("c%d-t%d", i, turn), d.w.ChatTurnAdded))
		pause(d.w.ChatThinkMin+time.Duration(rng.Int64N(int64(max(1, d.w.ChatThinkMax-d.w.ChatThinkMin)))), end)
	}
}

// batchTick is how finely a batch job's share of the prefill lane is cut:
// requests sent during a job queue behind at most one tick of it.
const batchTick = 50 * time.Millisecond

// batchRamp is how long a batch job takes to reach its full share, as
// its requests arrive.
const batchRamp = time.Second

// batch is the other tenant: from start, every BatchEvery, a job that
// holds BatchShare of each batchTick of backend 0's prefill lane for
// BatchFor, ramping up over its first batchRamp.
func (d *driver) batch(start, end time.Time) {
	for job := start; job.Before(end); job = job.Add(d.w.BatchEvery) {
		time.Sleep(time.Until(job))
		for t := job; t.Before(job.Add(d.w.BatchFor)) && t.Before(end); t = t.Add(batchTick) {
			time.Sleep(time.Until(t))
			ramp := min(1, float64(t.Sub(job)+batchTick)/float64(batchRamp))
			d.occupy(time.Duration(d.w.BatchShare * ramp * float64(batchTick)))
		}
	}
}

// pause sleeps for d, or until end if that comes first (no turn starts
// after it, so there is nothing to wait for).
func pause(d time.Duration, end time.Time) { time.Sleep(min(d, time.Until(end))) }

// replicaBase spreads sessions' first turns over the replicas.
func replicaBase(session string) int {
	h := fnv.New32a()
	h.Write([]byte(session))
	return int(h.Sum32() % 1024)
}

// words returns n distinct-enough tokens: prefix-0 … prefix-49, repeated.
func words(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s-%d ", prefix, i%50)
	}
	return b.String()
}

// send streams one chat completion, asking for the usage chunk, and
// returns the time to its first SSE event.
func (d *driver) send(url, session string, msgs []string, maxTokens int) sample {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	ms := make([]msg, len(msgs))
	for i, m := range msgs {
		// The system prompt, then user and assistant alternating.
		ms[i] = msg{Role: []string{"user", "assistant"}[i%2], Content: m}
	}
	body, _ := json.Marshal(map[string]any{
		"model": "modelsim", "stream": true, "stream_options": map[string]bool{"include_usage": true},
		"max_tokens": maxTokens, "messages": ms,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	req.Header.Set(StackHeader, d.tag)
	s := sample{start: time.Now()}
	resp, err := d.client.Do(req)
	if err != nil {
		s.err = err
		return s
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	usage := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		if s.ttft == 0 {
			s.ttft = time.Since(s.start)
		}
		usage = usage || strings.Contains(line, `"usage":{`)
	}
	switch {
	case resp.StatusCode != http.StatusOK:
		s.err = fmt.Errorf("status %d", resp.StatusCode)
	case sc.Err() != nil:
		s.err = sc.Err()
	case !usage:
		s.err = fmt.Errorf("stream without a usage chunk")
	}
	return s
}
