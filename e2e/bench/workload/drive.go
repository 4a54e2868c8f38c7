package workload

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/loadgen"
)

// Sample is one request's outcome.
type Sample struct {
	Conv, Turn     int
	Sent           time.Time
	TTFT           time.Duration // to the first SSE event with a token
	Done           time.Duration // to the end of the stream
	Prompt, Cached int           // usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens
	Backend        string        // the modelsim backend that answered (X-Modelsim-Id)
	Err            error
}

// requestTimeout bounds one turn.
const requestTimeout = 2 * time.Minute

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Drive plays every conversation against urls (one per router replica;
// turn t of a conversation goes to urls[t.Pick % len(urls)]) and returns
// one sample per request, in conversation and turn order. The model's
// answer is replaced in the history by deterministic text of the same
// length, so every policy sends byte-identical requests.
func Drive(ctx context.Context, convs []Conversation, p Params, urls []string) []Sample {
	client := &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 512,
		DisableCompression:  true,
	}}
	defer client.CloseIdleConnections()
	system := message{Role: "system", Content: words("sys", p.SystemTokens)}
	out := make([][]Sample, len(convs))
	start := time.Now()
	var wg sync.WaitGroup
	for ci := range convs {
		c := &convs[ci]
		wg.Go(func() {
			if !loadgen.Sleep(ctx, time.Until(start.Add(c.Start))) {
				return
			}
			msgs := []message{system}
			for ti, t := range c.Turns {
				msgs = append(msgs, message{Role: "user", Content: words(fmt.Sprintf("%s.t%d.u", c.ID, ti), t.UserTokens)})
				streamed := min(t.AnswerTokens, max(p.StreamTokens, 1))
				s := turn(ctx, client, urls[int(t.Pick%uint32(len(urls)))], c.ID, msgs, streamed)
				s.Conv, s.Turn = ci, ti
				out[ci] = append(out[ci], s)
				msgs = append(msgs, message{Role: "assistant", Content: words(fmt.Sprintf("%s.t%d.a", c.ID, ti), t.AnswerTokens)})
				if !loadgen.Sleep(ctx, t.Think+time.Duration(t.AnswerTokens-streamed)*p.Decode) {
					return
				}
			}
		})
	}
	wg.Wait()
	var all []Sample
	for _, s := range out {
		all = append(all, s...)
	}
	return all
}

// usageChunk is the final SSE event's usage (stream_options.include_usage).
type usageChunk struct {
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// turn streams one chat completion with the session's header.
func turn(ctx context.Context, c *http.Client, url, session string, msgs []message, maxTokens int) Sample {
	body, _ := json.Marshal(map[string]any{
		"model": "modelsim", "messages": msgs, "max_tokens": maxTokens,
		"stream": true, "stream_options": map[string]bool{"include_usage": true},
	})
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	s := Sample{Sent: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		s.Err = err
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	resp, err := c.Do(req)
	if err != nil {
		s.Err = err
		return s
	}
	defer resp.Body.Close()
	s.Backend = resp.Header.Get("X-Modelsim-Id")
	if resp.StatusCode != http.StatusOK {
		s.Err = fmt.Errorf("status %d", resp.StatusCode)
		return s
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var usage usageChunk
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		if s.TTFT == 0 && bytes.Contains(data, []byte(`"choices":[{`)) {
			s.TTFT = time.Since(s.Sent)
		}
		if bytes.Contains(data, []byte(`"usage"`)) {
			if err := json.Unmarshal(data, &usage); err != nil {
				s.Err = fmt.Errorf("usage chunk: %w", err)
			}
		}
	}
	s.Done = time.Since(s.Sent)
	switch {
	case sc.Err() != nil:
		s.Err = sc.Err()
	case s.Err != nil:
	case usage.Usage == nil:
		s.Err = errors.New("stream without a usage chunk")
	case s.TTFT == 0:
		s.Err = errors.New("stream without a token")
	default:
		s.Prompt, s.Cached = usage.Usage.PromptTokens, usage.Usage.PromptTokensDetails.CachedTokens
	}
	return s
}
