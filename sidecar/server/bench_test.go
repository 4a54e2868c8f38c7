package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkProxiedRequest compares one small request straight to a backend
// with the same request through the sidecar (header session key, memory
// store, sticky hit), over real loopback HTTP with keep-alive, side by side.
//
//	go test -run '^$' -bench ProxiedRequest -benchmem ./sidecar/server/
func BenchmarkProxiedRequest(b *testing.B) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","choices":[{"message":{"role":"assistant","content":"ok"}}]}`)
	}))
	defer backend.Close()
	sc := startSidecar(b, configFor("default/m", []string{strings.TrimPrefix(backend.URL, "http://")}, `[{type: Header, name: X-Session-ID}]`, ""))
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	run := func(b *testing.B, url string) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if status, _ := post(b, client, url, body); status != 200 {
					b.Fatalf("status %d", status)
				}
			}
		})
	}
	b.Run("direct", func(b *testing.B) { run(b, backend.URL+"/v1/chat/completions") })
	b.Run("via-sidecar", func(b *testing.B) { run(b, sc.url("default/m", "/v1/chat/completions")) })
}

// BenchmarkProxiedStream is BenchmarkProxiedRequest for a streamed
// completion: a backend flushing each of N server-sent events, straight
// and through the sidecar, which flushes each event on as it comes. An
// operation is one whole stream, so what the sidecar spends per event is
// the slope between the two lengths: (via-sidecar − direct at 50 events
// − the same at 5) / 45, in time and in allocations (none per event is
// the aim: a stream's events should cost the proxy its reads and writes).
//
//	go test -run '^$' -bench ProxiedStream -benchmem ./sidecar/server/
func BenchmarkProxiedStream(b *testing.B) {
	event := []byte(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n")
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n, _ := strconv.Atoi(r.URL.Query().Get("events"))
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for range n {
			w.Write(event)
			f.Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer backend.Close()
	sc := startSidecar(b, configFor("default/m", []string{strings.TrimPrefix(backend.URL, "http://")}, `[{type: Header, name: X-Session-ID}]`, ""))
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	for _, events := range []int{5, 50} {
		for _, via := range []struct{ name, url string }{
			{"direct", backend.URL + "/v1/chat/completions"},
			{"via-sidecar", sc.url("default/m", "/v1/chat/completions")},
		} {
			url := via.url + "?events=" + strconv.Itoa(events)
			b.Run(fmt.Sprintf("events=%d/%s", events, via.name), func(b *testing.B) {
				b.ReportAllocs()
				want := int64(events*len(event) + len("data: [DONE]\n\n"))
				for b.Loop() {
					if status, n := post(b, client, url, body); status != 200 || n != want {
						b.Fatalf("status %d, %d bytes, want 200 and %d", status, n, want)
					}
				}
			})
		}
	}
}

// post sends one benchmark request with the session header and reads the
// whole answer: its status and how many body bytes came.
func post(b *testing.B, client *http.Client, url, body string) (status int, n int64) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("X-Session-ID", "bench-session")
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	n, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, n
}
