package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// LoadOptions shape the steady load: Sessions conversations at once, each
// of Turns streamed turns with a think time between them; a finished
// conversation is followed by a new one.
type LoadOptions struct {
	Prefix    string // session keys: Prefix-slot-generation
	Sessions  int
	Turns     int
	MaxTokens int
	ThinkMin  time.Duration
	ThinkMax  time.Duration
}

// Record is one turn as the client saw it.
type Record struct {
	Session   string
	Turn      int
	RequestID string
	Replica   int
	Start     time.Time
	End       time.Time
	Status    int
	Backend   string // X-Modelsim-Id of the answer
	Err       string // why it failed; "" when it succeeded
	// PromptTokens and CachedTokens are the backend's usage report (the
	// stream's final usage chunk): the prompt's tokens, and those of them
	// its prefix cache held. Zero without a report.
	PromptTokens, CachedTokens int
}

// Failed reports whether the turn failed: no answer, a status other than
// 200, or a stream that ended before its [DONE].
func (r Record) Failed() bool { return r.Err != "" }

// Load is a running steady load.
type Load struct {
	c      *Cluster
	o      LoadOptions
	client *http.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	records []Record
}

// requestTimeout is the client's patience: a turn still unanswered after
// it counts as hung, which is a failure of its own kind.
const requestTimeout = 30 * time.Second

// StartLoad starts o.Sessions conversations against c's routable replicas.
func (c *Cluster) StartLoad(o LoadOptions) *Load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{c: c, o: o, cancel: cancel, client: &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second},
	}}
	for slot := range o.Sessions {
		l.wg.Go(func() { l.converse(ctx, slot) })
	}
	return l
}

// Stop ends the load after the turns in flight and returns every record.
func (l *Load) Stop() []Record {
	l.cancel()
	l.wg.Wait()
	l.client.CloseIdleConnections()
	return l.Records()
}

// Records are the turns finished so far, in order of their end.
func (l *Load) Records() []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Record(nil), l.records...)
}

func (l *Load) converse(ctx context.Context, slot int) {
	// Spread the conversations' starts over the first think time.
	sleep(ctx, time.Duration(rand.Int64N(int64(l.o.ThinkMax)+1)))
	for gen := 0; ctx.Err() == nil; gen++ {
		key := fmt.Sprintf("%s-%d-%d", l.o.Prefix, slot, gen)
		for turn := 1; turn <= l.o.Turns && ctx.Err() == nil; turn++ {
			r := l.c.pick(ctx)
			if r == nil {
				return
			}
			rec := l.Turn(ctx, r, key, turn, l.o.MaxTokens)
			if ctx.Err() != nil && rec.Failed() {
				return // the load stopping is no failure
			}
			l.mu.Lock()
			l.records = append(l.records, rec)
			l.mu.Unlock()
			think := l.o.ThinkMin + time.Duration(rand.Int64N(int64(l.o.ThinkMax-l.o.ThinkMin)+1))
			sleep(ctx, think)
		}
	}
}

// pick chooses a routable replica at random, as a Service spreads
// requests over its ready endpoints; it waits while none is.
func (c *Cluster) pick(ctx context.Context) *Replica {
	for ctx.Err() == nil {
		var ok []*Replica
		for _, r := range c.Replicas {
			if r.Routable() {
				ok = append(ok, r)
			}
		}
		if len(ok) > 0 {
			return ok[rand.IntN(len(ok))]
		}
		sleep(ctx, 20*time.Millisecond)
	}
	return nil
}

// Turn sends one streamed turn of conversation key through r and reads
// the stream to its end.
func (l *Load) Turn(ctx context.Context, r *Replica, key string, turn, maxTokens int) (rec Record) {
	rec = Record{Session: key, Turn: turn, RequestID: fmt.Sprintf("%s-t%d", key, turn), Replica: r.Index, Start: time.Now()}
	defer func() { rec.End = time.Now() }() // rec is the result: End is set as it returns
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	body := fmt.Sprintf(`{"model":"modelsim","stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,"messages":%s}`,
		maxTokens, Conversation(key, turn))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.URL("/v1/chat/completions"), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", key)
	req.Header.Set("X-Request-Id", rec.RequestID)
	resp, err := l.client.Do(req)
	if err != nil {
		rec.Err = err.Error()
		if ctx.Err() == context.DeadlineExceeded {
			rec.Err = "hung: no answer in " + requestTimeout.String()
		}
		return rec
	}
	defer resp.Body.Close()
	rec.Status, rec.Backend = resp.StatusCode, resp.Header.Get("X-Modelsim-Id")
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		rec.Err = fmt.Sprintf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		return rec
	}
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "data: [DONE]":
			done = true
		case strings.HasPrefix(line, "data: {") && strings.Contains(line, `"prompt_tokens_details"`):
			var chunk struct {
				Usage struct {
					PromptTokens int `json:"prompt_tokens"`
					Details      struct {
						CachedTokens int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			if json.Unmarshal([]byte(line[len("data: "):]), &chunk) == nil {
				rec.PromptTokens, rec.CachedTokens = chunk.Usage.PromptTokens, chunk.Usage.Details.CachedTokens
			}
		}
	}
	switch {
	case sc.Err() != nil:
		rec.Err = "stream cut: " + sc.Err().Error()
		if ctx.Err() == context.DeadlineExceeded {
			rec.Err = "hung: stream not done in " + requestTimeout.String()
		}
	case !done:
		rec.Err = "stream ended without [DONE]"
	}
	return rec
}

// Conversation is turn n of a conversation: its user turns so far, with
// short assistant replies between them, each turn's words distinct per
// session so prefix caches tell sessions apart.
func Conversation(key string, n int) string {
	var msgs []string
	for i := 1; i <= n; i++ {
		words := strings.Repeat(fmt.Sprintf("%s turn%d words ", key, i), 6)
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":%q}`, words))
		if i < n {
			msgs = append(msgs, `{"role":"assistant","content":"ok ok ok ok"}`)
		}
	}
	return "[" + strings.Join(msgs, ",") + "]"
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
