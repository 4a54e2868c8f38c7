package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/testkit"
)

// headersFirst is a backend as vLLM answers a stream: the response
// headers at once, the first token after the prefill. A request with
// X-Hold holds its first token until release is closed. It reports an
// empty queue to the load scrape, and counts the requests it served.
type headersFirst struct {
	id      string
	srv     *httptest.Server
	served  atomic.Int64
	holding atomic.Int64
}

func startHeadersFirst(t *testing.T, id string, release <-chan struct{}) *headersFirst {
	b := &headersFirst{id: id}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			fmt.Fprint(w, "vllm:num_requests_waiting 0\nvllm:num_requests_running 1\n")
			return
		}
		io.Copy(io.Discard, r.Body)
		b.served.Add(1)
		hold := r.Header.Get("X-Hold") != ""
		if hold {
			b.holding.Add(1) // before the headers: the client checks it on them
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Backend", b.id)
		w.(http.Flusher).Flush()
		if hold {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// TestCostPolicyTimesTheFirstTokenNotTheHeaders: under the cost policy a
// stream counts as late until its first token, not its headers (which
// vLLM sends at once): while one backend holds a stream's first token,
// new sessions are placed on the others, and the diversions are counted.
func TestCostPolicyTimesTheFirstTokenNotTheHeaders(t *testing.T) {
	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	bs := []*headersFirst{startHeadersFirst(t, "a", release), startHeadersFirst(t, "b", release), startHeadersFirst(t, "c", release)}
	var static []string
	for _, b := range bs {
		static = append(static, strings.TrimPrefix(b.srv.URL, "http://"))
	}
	// Scrapes every 200 ms: a sample is fresh for three intervals, and
	// every decision below needs fresh ones even on a loaded machine.
	cfg := affinityConfigAt(static, "{mode: soft, policy: cost, costMargin: 0.25, prefillTokensPerSecond: 1000000}", "")
	sc := startSidecar(t, strings.Replace(cfg, "{interval: 50ms, timeout: 50ms}", "{interval: 200ms, timeout: 150ms}", 1))
	url := sc.url("default/m", "/v1/chat/completions")
	send := func(session string, hold bool) (*http.Response, error) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hello there"}]}`))
		req.Header.Set("X-Session-ID", session)
		if hold {
			req.Header.Set("X-Hold", "1")
		}
		return (&http.Client{Timeout: 30 * time.Second}).Do(req)
	}
	complete := func(session string) {
		resp, err := send(session, false)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// Every backend scraped before the test begins: the cost policy
	// needs a fresh sample of each.
	for i := range 6 {
		complete(fmt.Sprint("warm-", i))
	}
	time.Sleep(500 * time.Millisecond)

	// One stream whose headers arrive at once and whose first token is held.
	held, err := send("held", true)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Body.Close()
	late := held.Header.Get("X-Backend")
	var lateBackend *headersFirst
	for _, b := range bs {
		if b.id == late {
			lateBackend = b
		}
	}
	if lateBackend == nil || lateBackend.holding.Load() != 1 {
		t.Fatalf("the held stream reached %q", late)
	}
	before := lateBackend.served.Load()
	time.Sleep(100 * time.Millisecond) // the stream is late from here on

	for i := range 30 {
		complete(fmt.Sprint("new-", i))
	}
	if n := lateBackend.served.Load() - before; n != 0 {
		t.Fatalf("%d of 30 new sessions were placed on backend %s, whose stream's first token is 100 ms late", n, late)
	}
	testkit.Eventually(t, 5*time.Second, "the diversions counted", func() error {
		resp, err := http.Get(sc.admin("/metrics"))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, `tether_placements_diverted_total{pool="default/m"} `) {
				if strings.HasSuffix(line, " 0") {
					return fmt.Errorf("%s", line)
				}
				return nil
			}
		}
		return fmt.Errorf("no tether_placements_diverted_total")
	})
}
