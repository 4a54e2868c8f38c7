package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
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
				req, _ := http.NewRequest("POST", url, strings.NewReader(body))
				req.Header.Set("X-Session-ID", "bench-session")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
	b.Run("direct", func(b *testing.B) { run(b, backend.URL+"/v1/chat/completions") })
	b.Run("via-sidecar", func(b *testing.B) { run(b, sc.url("default/m", "/v1/chat/completions")) })
}
