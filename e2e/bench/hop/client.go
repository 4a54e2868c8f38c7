package hop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/tetherproxy/tether/e2e/bench/loadgen"
)

// Mode is the response shape.
type Mode string

const (
	NonStreaming Mode = "non-streaming" // one small JSON body (8 output tokens)
	Streaming    Mode = "streaming"     // SSE, one event per token
)

// StreamEvents is the number of SSE events of a streamed response.
const StreamEvents = 50

// requestTimeout bounds one request; a slower one counts as an error.
const requestTimeout = 10 * time.Second

// client sends the benchmark's requests: a short chat completion, each
// with the X-Session-ID of one of sessions sessions (request i is session
// i mod sessions), keep-alive connections.
type client struct {
	http     *http.Client
	urls     []string // per session: the proxy, or direct the backend the session hashes to
	sessions []string
	body     []byte
	stream   bool
}

func newClient(t *target, backends []string, sessions int, mode Mode) *client {
	c := &client{
		http: &http.Client{Transport: &http.Transport{
			Proxy:               nil, // loopback only, whatever the environment says
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}},
		stream: mode == Streaming,
	}
	tokens := 8
	if c.stream {
		tokens = StreamEvents
	}
	c.body = fmt.Appendf(nil, `{"model":"modelsim","stream":%t,"max_tokens":%d,"messages":[{"role":"user","content":"how far is the moon from the earth"}]}`, c.stream, tokens)
	for i := range sessions {
		s := fmt.Sprintf("hop-%06d", i)
		c.sessions = append(c.sessions, s)
		url := t.url
		if t.proc == nil { // direct: the client itself pins each session by hash
			h := fnv.New32a()
			h.Write([]byte(s))
			url = "http://" + backends[h.Sum32()%uint32(len(backends))]
		}
		c.urls = append(c.urls, url+"/v1/chat/completions")
	}
	return c
}

var done = []byte("data: [DONE]")

// do is a loadgen.Do: one request, read to its end.
func (c *client) do(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	s := i % len(c.sessions)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.urls[s], bytes.NewReader(c.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", c.sessions[s])
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var buf [4096]byte
	var tail []byte
	for {
		n, err := resp.Body.Read(buf[:])
		if n > 0 && c.stream {
			tail = append(tail[max(0, len(tail)-len(done)):], buf[:n]...)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	if c.stream && !bytes.Contains(tail, done) {
		return errors.New("stream ended without [DONE]")
	}
	return nil
}

func (c *client) close() { c.http.CloseIdleConnections() }

var _ loadgen.Do = (*client)(nil).do
