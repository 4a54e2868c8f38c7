package server_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/server"
)

// received is what a backend received of one request.
type received struct {
	method, uri string
	header      http.Header
	names       []string // the field names, in the order they came
	body        string
}

// tcpBackend is a backend on a bare TCP listener: it reads each request
// of a connection (n from 0) and hands it to handle, then answers with a
// small JSON body, or, when handle says not to, closes the connection
// without a response byte.
func tcpBackend(t testing.TB, handle func(n int, r received) bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for n := 0; ; n++ {
					r, err := readReceived(br)
					if err != nil || !handle(n, r) {
						return
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Modelsim-Id: raw\r\nContent-Length: 2\r\n\r\n{}")
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// readReceived reads one request from br: its head line by line (the
// field names in their order), then its body of Content-Length bytes.
func readReceived(br *bufio.Reader) (received, error) {
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return received{}, err
		}
		head = append(head, line...)
		if len(line) <= 2 {
			break
		}
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return received{}, err
	}
	body := make([]byte, max(req.ContentLength, 0))
	if _, err := io.ReadFull(br, body); err != nil {
		return received{}, err
	}
	r := received{method: req.Method, uri: req.RequestURI, header: req.Header, body: string(body)}
	for _, line := range strings.Split(strings.TrimRight(string(head), "\r\n"), "\r\n")[1:] {
		name, _, _ := strings.Cut(line, ":")
		r.names = append(r.names, name)
	}
	return r, nil
}

// recordingBackend is a tcpBackend that sends what it received on the
// returned channel.
func recordingBackend(t testing.TB) (addr string, got <-chan received) {
	ch := make(chan received, 16)
	return tcpBackend(t, func(_ int, r received) bool { ch <- r; return true }), ch
}

// generatedID is a request id the sidecar made (a version 4 UUID).
var generatedID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// listedAndMapped are two sidecars of one config, the first reading
// requests as lists of fields (its default), the second from header maps,
// each in front of a recording backend of its own.
type listedAndMapped struct {
	listed, mapped     *sidecar
	toListed, toMapped <-chan received
}

func startListedAndMapped(t testing.TB) *listedAndMapped {
	key := filepath.Join(t.TempDir(), "token-key")
	os.WriteFile(key, []byte(strings.Repeat("k", 32)), 0o600)
	cfg := func(backend string) string {
		return configFor("default/m", []string{backend},
			`[{type: Token, name: x-session-token}, {type: Header, name: X-Session-ID}, {type: Cookie, name: sid}]`, "") +
			"    sessionToken: {keyFile: " + key + "}\n"
	}
	var p listedAndMapped
	var a, b string
	a, p.toListed = recordingBackend(t)
	b, p.toMapped = recordingBackend(t)
	p.listed = startSidecar(t, cfg(a))
	p.mapped = startSidecar(t, cfg(b), func(d *server.Deps) { d.MappedRequests = true })
	return &p
}

// send writes raw to both sidecars, each on a connection of its own, and
// returns what each one's backend received and each one's answer; ok is
// false when either answered without asking its backend.
func (p *listedAndMapped) send(t testing.TB, raw string) (l, m received, ok bool) {
	t.Helper()
	one := func(sc *sidecar, got <-chan received) (received, int, bool) {
		c, err := net.Dial("tcp", sc.srv.PoolAddr("default/m"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return received{}, 0, false
		}
		io.Copy(io.Discard, resp.Body)
		select {
		case r := <-got:
			return r, resp.StatusCode, true
		default:
			return received{}, resp.StatusCode, false
		}
	}
	l, ls, lok := one(p.listed, p.toListed)
	m, ms, mok := one(p.mapped, p.toMapped)
	if ls != ms || lok != mok {
		t.Fatalf("%q: listed answered %d (backend asked: %v), mapped %d (%v)", raw, ls, lok, ms, mok)
	}
	return l, m, lok && mok
}

// checkSame: the two backends received the same request, field by field
// (a request id the sidecars made each is compared as made).
func checkSame(t testing.TB, raw string, l, m received) {
	t.Helper()
	for _, r := range []*received{&l, &m} {
		if ids := r.header["X-Request-Id"]; len(ids) == 1 && generatedID.MatchString(ids[0]) &&
			!strings.Contains(raw, ids[0]) {
			r.header["X-Request-Id"] = []string{"generated"}
		}
	}
	if l.method != m.method || l.uri != m.uri || l.body != m.body || !reflect.DeepEqual(l.header, m.header) {
		t.Fatalf("%q reached the backend otherwise as a list:\n%+v\nas a map:\n%+v", raw, l, m)
	}
}

// listedRequests are client requests of the common shape with every
// field the proxy reads or rewrites, in orders and spellings that differ.
var listedRequests = []string{
	"POST /v1/completions HTTP/1.1\r\nHost: r\r\nX-Zeta: 1\r\nX-Session-ID: s1\r\nX-Alpha: 2\r\nContent-Length: 2\r\n\r\n{}",
	"POST /v1/completions?a=1;b=2 HTTP/1.1\r\nHost: r\r\nX-Forwarded-For: 203.0.113.7\r\nX-Forwarded-For: 10.0.0.1, 10.0.0.2\r\n" +
		"X-Forwarded-Proto: https\r\nForwarded: for=1.2.3.4\r\nX-Request-Id: client-id-1\r\nContent-Length: 2\r\n\r\n{}",
	"GET /v1/models HTTP/1.1\r\nHost: r\r\nConnection: keep-alive, X-Drop, x-forwarded-host\r\nX-Drop: 1\r\nX-Forwarded-Host: orig\r\n" +
		"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTe: trailers, deflate\r\nUser-Agent: router/1\r\nUser-Agent: second\r\n\r\n",
	"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nx_session_token: forged\r\nX_Session-Token: forged2\r\nx-gateway-destination-endpoint: 10.0.0.9:80\r\n" +
		"X-Prefiller-Host-Port: 10.0.0.9:81\r\nx-session-id: lower\r\nCookie: sid=c1; other=2\r\nContent-Length: 2\r\n\r\n{}",
	"GET / HTTP/1.1\r\nHost: r\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nUser-Agent:\r\nX-Request-Id: " + strings.Repeat("long", 40) + "\r\nPragma: no-cache\r\n\r\n",
	"DELETE /v1/responses/resp_1 HTTP/1.1\r\nHost: r\r\nConnection: user-agent, X-Request-Id\r\nUser-Agent: gone\r\nX-Request-Id: named\r\n" +
		"Authorization: Bearer t\r\nAccept: */*\r\n\r\n",
}

// TestListedRequestsAsMapped: a request read as a list of fields reaches
// the backend as the same request read into a header map does, field by
// field and value by value; only the order differs, the client's kept.
func TestListedRequestsAsMapped(t *testing.T) {
	p := startListedAndMapped(t)
	for _, raw := range listedRequests {
		l, m, ok := p.send(t, raw)
		if !ok {
			t.Fatalf("%q: not forwarded", raw)
		}
		checkSame(t, raw, l, m)
	}
	// The list path was taken: the client's order, where the map's is
	// sorted.
	l, m, _ := p.send(t, listedRequests[0])
	if i, j := index(l.names, "X-Zeta"), index(l.names, "X-Alpha"); i < 0 || j < i {
		t.Errorf("listed: fields reached the backend in the order %v", l.names)
	}
	if i, j := index(m.names, "X-Zeta"), index(m.names, "X-Alpha"); i < 0 || i < j {
		t.Errorf("mapped: fields reached the backend in the order %v", m.names)
	}
}

func index(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}

// FuzzListedRequestsAsMapped: TestListedRequestsAsMapped's check on
// requests of three fields the fuzzer names and fills, after a
// Connection field of its own.
//
//	go test -run '^$' -fuzz FuzzListedRequestsAsMapped ./sidecar/server/
func FuzzListedRequestsAsMapped(f *testing.F) {
	f.Add("X-A", "1", "x-forwarded-for", "1.2.3.4", "User-Agent", "u", "x-a")
	f.Add("x_session_token", "t", "Te", "trailers", "X-Forwarded-Host", "h", "te, x-forwarded-host")
	f.Add("Forwarded", "for=x", "X-Request-Id", "id-1", "Upgrade", "h2c", "Upgrade")
	f.Add("User-Agent", "", "user-agent", "b", "Cookie", "sid=1", "")
	p := startListedAndMapped(f)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3, conn string) {
		var b strings.Builder
		b.WriteString("POST /v1/completions HTTP/1.1\r\nHost: r\r\n")
		for _, kv := range [][2]string{{"Connection", conn}, {k1, v1}, {k2, v2}, {k3, v3}} {
			if strings.ContainsAny(kv[0]+kv[1], "\r\n") || strings.EqualFold(kv[0], "Content-Length") ||
				strings.EqualFold(kv[0], "Transfer-Encoding") || strings.EqualFold(kv[0], "Expect") || strings.EqualFold(kv[0], "Host") {
				return
			}
			b.WriteString(kv[0] + ": " + kv[1] + "\r\n")
		}
		b.WriteString("Content-Length: 2\r\n\r\n{}")
		raw := b.String()
		if l, m, ok := p.send(t, raw); ok {
			checkSame(t, raw, l, m)
		}
	})
}
