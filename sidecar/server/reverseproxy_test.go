package server_test

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

// The sidecar forwards with rules of its own code (package proxy's
// attempt.go) that were httputil.ReverseProxy's with the Rewrite tether
// used. TestForwardsAsReverseProxyDid sends the same requests through the
// sidecar and through that ReverseProxy, to one backend, and compares
// what the backend received and what the client read.

// seenRequest is what the backend received.
type seenRequest struct {
	Method, URI, Host string
	Header            http.Header
	Body              string
}

// conformanceBackend answers by path and records each request by its
// X-Case header.
func conformanceBackend(t *testing.T, seen map[string]seenRequest, mu chan struct{}) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		mu <- struct{}{}
		seen[r.Header.Get("X-Case")] = seenRequest{r.Method, r.RequestURI, "", h, string(body)}
		<-mu
		switch r.URL.Path {
		case "/hop":
			w.Header().Set("Connection", "X-Resp-Hop")
			w.Header().Set("X-Resp-Hop", "1")
			w.Header().Set("Keep-Alive", "timeout=5")
			w.Header().Set("Proxy-Authenticate", "Basic")
			w.Header().Add("Set-Cookie", "a=1")
			w.Header().Add("Set-Cookie", "b=2")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ok":true}`)
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			for i := range 3 {
				fmt.Fprintf(w, "data: %d\n\n", i)
				w.(http.Flusher).Flush()
			}
		case "/trailers":
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "42")
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		case "/early-hints":
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			io.WriteString(w, "final")
		case "/no-content":
			w.WriteHeader(http.StatusNoContent)
		case "/error":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"busy"}`)
		case "/unknown-length":
			io.WriteString(w, strings.Repeat("x", 5000))
			w.(http.Flusher).Flush()
			io.WriteString(w, "end")
		case "/cut":
			// A body that breaks off after its beginning: the client must
			// see a cut response, not a complete one.
			w.Header().Set("Content-Length", "100")
			io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		default:
			io.WriteString(w, "ok")
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// referenceProxy is httputil.ReverseProxy with the Rewrite the sidecar
// had: X-Forwarded-For restored and appended to, X-Forwarded-Host and
// -Proto kept when sent, the backend as Host.
func referenceProxy(t *testing.T, backend string) string {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			in, out := pr.In.Header, pr.Out.Header
			out["X-Forwarded-For"] = in["X-Forwarded-For"]
			pr.SetXForwarded()
			for _, k := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
				if v := in[k]; len(v) > 0 {
					out[k] = v
				}
			}
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "http", backend, backend
		},
		ErrorLog: log.New(io.Discard, "", 0), // the cut body case logs its read error
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv.URL
}

// clientView is what a client read from a proxy.
type clientView struct {
	Status        int // -1: no response at all
	Informational []string
	Header        http.Header
	Body          string
	BodyErr       bool
	Trailer       http.Header
}

func TestForwardsAsReverseProxyDid(t *testing.T) {
	seen := map[string]seenRequest{}
	mu := make(chan struct{}, 1)
	backend := conformanceBackend(t, seen, mu)
	sc := startSidecar(t, configFor("default/m", []string{backend}, `[{type: Header, name: X-Session-ID}]`, ""))
	proxies := map[string]string{"sidecar": sc.url("default/m", ""), "ReverseProxy": referenceProxy(t, backend)}

	type request struct {
		method, path string
		header       map[string][]string
		body         string
	}
	cases := map[string]request{
		"plain POST":          {"POST", "/v1/completions", nil, `{"prompt":"hi"}`},
		"GET without body":    {"GET", "/v1/models", nil, ""},
		"HEAD":                {"HEAD", "/v1/models", nil, ""},
		"no User-Agent":       {"POST", "/x", map[string][]string{"User-Agent": {""}}, "{}"},
		"a User-Agent":        {"POST", "/x", map[string][]string{"User-Agent": {"router/1.0"}}, "{}"},
		"Connection-named":    {"POST", "/x", map[string][]string{"Connection": {"X-Hop, x-other"}, "X-Hop": {"1"}, "X-Other": {"2"}, "X-Kept": {"3"}}, "{}"},
		"hop-by-hop request":  {"POST", "/x", map[string][]string{"Keep-Alive": {"timeout=5"}, "Proxy-Authorization": {"Basic x"}, "Proxy-Connection": {"keep-alive"}}, "{}"},
		"Te: trailers":        {"POST", "/x", map[string][]string{"Te": {"gzip, trailers"}}, "{}"},
		"Te without trailers": {"POST", "/x", map[string][]string{"Te": {"gzip"}}, "{}"},
		"forwarded chain":     {"POST", "/x", map[string][]string{"X-Forwarded-For": {"10.0.0.1", "10.0.0.2, 10.0.0.3"}, "X-Forwarded-Host": {"api.example"}, "X-Forwarded-Proto": {"https"}, "Forwarded": {"for=1.2.3.4"}}, "{}"},
		"upgrade asked":       {"GET", "/x", map[string][]string{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}, ""},
		"query with ;":        {"GET", "/x?a=1;b=2&c=3", nil, ""},
		"query, bad escape":   {"GET", "/x?a=%zz&b=1", nil, ""},
		"query, escaped":      {"GET", "/x?a=%20b&c=d%2Fe", nil, ""},
		"escaped path":        {"GET", "/a%2Fb/c%20d", nil, ""},
		"repeated header":     {"POST", "/x", map[string][]string{"X-Multi": {"1", "2"}, "Accept": {"a", "b"}}, "{}"},
		"hop-by-hop response": {"POST", "/hop", nil, "{}"},
		"stream":              {"POST", "/stream", nil, "{}"},
		"trailers":            {"POST", "/trailers", map[string][]string{"Te": {"trailers"}}, "{}"},
		"early hints":         {"POST", "/early-hints", nil, "{}"},
		"no content":          {"POST", "/no-content", nil, "{}"},
		"backend error":       {"POST", "/error", nil, "{}"},
		"unknown length":      {"POST", "/unknown-length", nil, "{}"},
		"cut body":            {"POST", "/cut", nil, "{}"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			views := map[string]clientView{}
			got := map[string]seenRequest{}
			for proxy, base := range proxies {
				key := proxy + "/" + name
				views[proxy] = send(t, base, key, c.method, c.path, c.header, c.body)
				mu <- struct{}{}
				s, ok := seen[key]
				<-mu
				if !ok {
					t.Fatalf("%s: the backend saw no request", proxy)
				}
				s.Header.Del("X-Case")
				s.Header.Del("Accept-Encoding") // the client's transport adds it, per connection
				got[proxy] = s
			}
			if !reflect.DeepEqual(got["sidecar"], got["ReverseProxy"]) {
				t.Errorf("the backend saw\n sidecar:      %+v\n ReverseProxy: %+v", got["sidecar"], got["ReverseProxy"])
			}
			if !reflect.DeepEqual(views["sidecar"], views["ReverseProxy"]) {
				t.Errorf("the client read\n sidecar:      %+v\n ReverseProxy: %+v", views["sidecar"], views["ReverseProxy"])
			}
		})
	}
}

// send makes one request on a fresh connection (so the framing of one
// answer cannot affect the next) with the headers given exactly, and
// returns what the client read. X-Request-Id is set, so the sidecar
// forwards the client's instead of one of its own.
func send(t *testing.T, base, key, method, path string, header map[string][]string, body string) clientView {
	t.Helper()
	u, _ := url.Parse(base)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: router.local\r\nX-Case: %s\r\nX-Request-Id: req-1\r\n", method, path, key)
	names := make([]string, 0, len(header))
	for k := range header {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range header[k] {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	if body != "" || method == "POST" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("Connection: close\r\n\r\n" + body)
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var v clientView
	req := &http.Request{Method: method}
	for {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			v.Status = -1 // no response: the connection closed first
			return v
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			v.Informational = append(v.Informational, fmt.Sprintf("%d %v", resp.StatusCode, textproto.MIMEHeader(resp.Header)))
			continue
		}
		data, err := io.ReadAll(resp.Body)
		v.Status, v.Body, v.BodyErr, v.Trailer = resp.StatusCode, string(data), err != nil, resp.Trailer
		v.Header = resp.Header
		v.Header.Del("Date")
		return v
	}
}

// TestStreamHeadersComeFirst: a stream's headers reach the client as soon
// as the backend sends them, before its first event (a prefill behind a
// queue can take seconds), as ReverseProxy's flush did.
func TestStreamHeadersComeFirst(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: 1\n\n")
	}))
	t.Cleanup(srv.Close)
	defer close(release)
	sc := startSidecar(t, configFor("default/m", []string{strings.TrimPrefix(srv.URL, "http://")}, `[{type: Header, name: X-Session-ID}]`, ""))
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Post(sc.url("default/m", "/v1/completions"), "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("no response headers before the first event: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
