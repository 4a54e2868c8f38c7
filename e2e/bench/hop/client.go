package hop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
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
// i mod sessions), on keep-alive connections.
//
// It writes each request's bytes, made once per session, and reads the
// answer on the goroutine that sent it: no net/http Transport, whose
// reader and writer goroutines per connection and channel hand-offs cost
// about as much CPU per request as the proxies measured. On a 2-core
// machine the generator and the backends share the cores with the proxy;
// what they spend is taken from it.
type client struct {
	sessions []session
	stream   bool
	// closeEvery: request i closes its connection once answered when
	// i+1 is a multiple of it (0: never).
	closeEvery int
}

// session is where one session's requests go and what they are.
type session struct {
	pool *pool
	req  []byte // the whole request: line, headers, body
}

// Requests' fields besides Host, Content-Type, X-Session-ID and
// Content-Length (Options.Headers).
const (
	HeadersPlain = "plain" // none
	// HeadersSDK are those an application's request carries through a
	// router that forwards its client's fields: what the OpenAI Python
	// SDK sends (over httpx) besides the body's type and length, a
	// bearer key among them.
	HeadersSDK = "sdk"
)

// sdkFields are HeadersSDK's fields, one line each.
const sdkFields = "Accept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\nAccept: application/json\r\n" +
	"User-Agent: OpenAI/Python 1.54.4\r\nX-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.54.4\r\n" +
	"X-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\nX-Stainless-Runtime: CPython\r\n" +
	"X-Stainless-Runtime-Version: 3.12.7\r\nAuthorization: Bearer sk-bench-0123456789abcdef0123456789abcdef\r\n" +
	"X-Stainless-Async: false\r\nX-Stainless-Retry-Count: 0\r\nX-Stainless-Read-Timeout: 600\r\n"

// HeaderLines are the fields of a request of headers (Options.Headers),
// or an error naming the sets there are.
func HeaderLines(headers string) (string, error) {
	switch headers {
	case "", HeadersPlain:
		return "", nil
	case HeadersSDK:
		return sdkFields, nil
	}
	return "", fmt.Errorf("headers %q (want %s or %s)", headers, HeadersPlain, HeadersSDK)
}

// promptFiller pads a request's prompt to Options.PromptBytes, as the
// conversation so far does in a later turn.
const promptFiller = " and then, earlier in the conversation, more of what was said"

// newClient makes the sessions' requests: each body a chat completion of
// promptBytes bytes at least (0: the small one).
func newClient(t *target, backends []string, sessions int, mode Mode, extra string, promptBytes int) *client {
	c := &client{stream: mode == Streaming}
	tokens := 8
	if c.stream {
		tokens = StreamEvents
	}
	chat := func(content string) []byte {
		return fmt.Appendf(nil, `{"model":"modelsim","stream":%t,"max_tokens":%d,"messages":[{"role":"user","content":"%s"}]}`, c.stream, tokens, content)
	}
	const question = "how far is the moon from the earth"
	body := chat(question)
	if pad := promptBytes - len(body); pad > 0 {
		body = chat(question + strings.Repeat(promptFiller, pad/len(promptFiller)+1)[:pad])
	}
	pools := map[string]*pool{}
	for i := range sessions {
		s := fmt.Sprintf("hop-%06d", i)
		addr := ""
		if t.url == "" { // direct: the client itself pins each session by hash
			h := fnv.New32a()
			h.Write([]byte(s))
			addr = backends[h.Sum32()%uint32(len(backends))]
		} else {
			u, err := url.Parse(t.url)
			if err != nil {
				panic(fmt.Sprintf("hop: target %s: %v", t.name, err)) // made by this package
			}
			addr = u.Host
		}
		p := pools[addr]
		if p == nil {
			p = &pool{addr: addr}
			pools[addr] = p
		}
		req := fmt.Appendf(nil, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\n%sContent-Type: application/json\r\nX-Session-ID: %s\r\nContent-Length: %d\r\n\r\n", addr, extra, s, len(body))
		c.sessions = append(c.sessions, session{pool: p, req: append(req, body...)})
	}
	return c
}

var done = []byte("data: [DONE]")

// do is a loadgen.Do: one request, read to its end. A request that
// fails on a reused connection before any byte of its answer arrived is
// sent once more on a new one (the server may have closed it idle), as
// net/http's Transport does.
func (c *client) do(ctx context.Context, i int) error {
	s := &c.sessions[i%len(c.sessions)]
	for {
		cn, reused, err := s.pool.get(ctx)
		if err != nil {
			return err
		}
		keep, answered, err := c.exchange(cn, s.req)
		if c.closeEvery > 0 && (i+1)%c.closeEvery == 0 {
			keep = false
		}
		if err == nil && keep {
			s.pool.put(cn)
		} else {
			cn.nc.Close()
		}
		if err != nil && reused && !answered && ctx.Err() == nil {
			continue
		}
		return err
	}
}

// exchange sends req on cn and reads its answer whole. keep reports
// whether the connection can carry another request; answered whether
// any byte of an answer arrived.
func (c *client) exchange(cn *conn, req []byte) (keep, answered bool, err error) {
	if err := cn.nc.SetDeadline(time.Now().Add(requestTimeout)); err != nil {
		return false, false, err
	}
	if _, err := cn.nc.Write(req); err != nil {
		return false, false, err
	}
	if _, err := cn.br.Peek(1); err != nil {
		return false, false, err
	}
	resp, err := http.ReadResponse(cn.br, nil)
	if err != nil {
		return false, true, err
	}
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
			return false, true, err
		}
	}
	if resp.StatusCode != http.StatusOK {
		return !resp.Close, true, fmt.Errorf("status %d", resp.StatusCode)
	}
	if c.stream && !bytes.Contains(tail, done) {
		return false, true, errors.New("stream ended without [DONE]")
	}
	return !resp.Close, true, nil
}

// close closes the idle connections; the client is done.
func (c *client) close() {
	seen := map[*pool]bool{}
	for _, s := range c.sessions {
		if !seen[s.pool] {
			seen[s.pool] = true
			s.pool.close()
		}
	}
}

// conn is one keep-alive connection and its reader.
type conn struct {
	nc net.Conn
	br *bufio.Reader
}

// pool holds one address's idle connections, most recently used first.
type pool struct {
	addr string
	mu   sync.Mutex
	idle []*conn
}

func (p *pool) get(ctx context.Context) (cn *conn, reused bool, err error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		cn = p.idle[n-1]
		p.idle = p.idle[:n-1]
	}
	p.mu.Unlock()
	if cn != nil {
		return cn, true, nil
	}
	cn, err = dial(ctx, p.addr, 8<<10)
	return cn, false, err
}

// dial opens a connection to addr with a reader of readerSize bytes.
func dial(ctx context.Context, addr string, readerSize int) (*conn, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, readerSize)}, nil
}

func (p *pool) put(cn *conn) {
	p.mu.Lock()
	p.idle = append(p.idle, cn)
	p.mu.Unlock()
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cn := range p.idle {
		cn.nc.Close()
	}
	p.idle = nil
}

var _ loadgen.Do = (*client)(nil).do
