package server_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/store/redisstore/redistest"
	"github.com/tetherproxy/tether/sidecar/testkit"
	"github.com/tetherproxy/tether/sidecar/testkit/freeport"
)

const respPool = "default/m"

// turn is the outcome of one Responses API request.
type turn struct {
	status    int
	backend   string // X-Modelsim-Id
	id        string // the new response's id
	errCode   string
	errMsg    string
	completed bool // a stream ended with response.completed
}

var respClient = &http.Client{Timeout: 30 * time.Second}

// respond sends one POST /v1/responses (streamed or not) to base.
func respond(t *testing.T, base string, body map[string]any, stream bool) turn {
	t.Helper()
	body["model"], body["stream"] = "modelsim", stream
	if _, ok := body["max_output_tokens"]; !ok {
		body["max_output_tokens"] = 4
	}
	b, _ := json.Marshal(body)
	resp, err := respClient.Post(base+"/v1/responses", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("POST /v1/responses: %v", err)
	}
	defer resp.Body.Close()
	return readTurn(t, resp)
}

func readTurn(t *testing.T, resp *http.Response) turn {
	t.Helper()
	tr := turn{status: resp.StatusCode, backend: resp.Header.Get("X-Modelsim-Id")}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct {
				Type     string `json:"type"`
				Response struct {
					ID string `json:"id"`
				} `json:"response"`
			}
			json.Unmarshal([]byte(data), &ev)
			switch ev.Type {
			case "response.created":
				tr.id = ev.Response.ID
			case "response.completed":
				tr.completed = true
			}
		}
		return tr
	}
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		ID    string `json:"id"`
		Error struct {
			Message string `json:"message"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	json.Unmarshal(raw, &out)
	tr.id, tr.errMsg = out.ID, out.Error.Message
	if c, ok := out.Error.Code.(string); ok {
		tr.errCode = c
	}
	return tr
}

// responseByID sends method to /v1/responses/{id}{suffix}.
func responseByID(t *testing.T, base, method, id, suffix string) turn {
	t.Helper()
	req, _ := http.NewRequest(method, base+"/v1/responses/"+id+suffix, nil)
	resp, err := respClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, id, err)
	}
	defer resp.Body.Close()
	return readTurn(t, resp)
}

// notFound: the answer is a model server's (or tether's) "not found".
func (tr turn) notFound() bool { return tr.status == http.StatusNotFound }

// chain runs turns Responses API turns, each continuing the last stored
// response, sending turn i to bases[i%len(bases)]. It returns the
// answers; a turn that failed is continued from the last good response.
func chain(t *testing.T, bases []string, turns int, stream bool) []turn {
	t.Helper()
	var out []turn
	prev := ""
	for i := range turns {
		body := map[string]any{"input": fmt.Sprintf("turn %d: %s", i, strings.Repeat("tell me more about it ", 5))}
		if prev != "" {
			body["previous_response_id"] = prev
		}
		tr := respond(t, bases[i%len(bases)], body, stream)
		if tr.status == http.StatusOK && tr.id != "" {
			prev = tr.id
		}
		out = append(out, tr)
	}
	return out
}

// freeAddr is a loopback address for a gossip bind (TCP and UDP), below
// the ephemeral range (freeport).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// sharedStores returns the store blocks of two replicas that share
// bindings: a gossip ring of the two, or one real redis-server.
func sharedStores(t *testing.T, kind string) (a, b string) {
	switch kind {
	case "gossip":
		keyFile := gossipKeyFile(t)
		ga, gb := freeAddr(t), freeAddr(t)
		store := func(bind, join string) string {
			return fmt.Sprintf("store:\n  backend: gossip\n  gossip: {bind: %q, join: [%q], secretKeyFile: %q}", bind, join, keyFile)
		}
		return store(ga, gb), store(gb, ga)
	default:
		rs := redistest.Start(t)
		s := fmt.Sprintf("store:\n  backend: redis\n  redis: {address: %q}", rs.Addr)
		return s, s
	}
}

// gossipKeyFile writes a fresh gossip secret key and returns its path.
func gossipKeyFile(t *testing.T) string {
	key := make([]byte, 32)
	rand.Read(key)
	keyFile := filepath.Join(t.TempDir(), "gossip.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile
}

func simByID(bs []*backend, id string) *backend {
	for _, b := range bs {
		if b.sim.ID() == id {
			return b
		}
	}
	return nil
}

// TestResponsesAcrossReplicas: two router replicas sharing a store (a
// gossip ring, a real Redis) in front of three modelsim backends, each
// of which keeps its stored responses in its own memory, as vLLM does.
func TestResponsesAcrossReplicas(t *testing.T) {
	for _, kind := range []string{"gossip", "redis"} {
		t.Run(kind, func(t *testing.T) {
			bs := startBackends(t, 3)
			storeA, storeB := sharedStores(t, kind)
			sources := `[{type: Header, name: X-Session-ID}]`
			a := startSidecar(t, configFor(respPool, addrs(bs), sources, storeA))
			b := startSidecar(t, configFor(respPool, addrs(bs), sources, storeB))
			if kind == "gossip" {
				for _, sc := range []*sidecar{a, b} {
					testkit.Eventually(t, 20*time.Second, "2 gossip members", func() bool {
						v, err := testkit.FindMetric(sc.srv.Registry(), "tether_gossip_members")
						return err == nil && v == 2
					})
				}
			}
			bases := []string{a.url(respPool, ""), b.url(respPool, "")}

			// A 10-turn chain alternating replicas, not streamed and streamed:
			// every turn is served, by the backend that holds the chain.
			var last turn
			for _, stream := range []bool{false, true} {
				turns := chain(t, bases, 10, stream)
				for i, tr := range turns {
					if tr.status != http.StatusOK || tr.id == "" || tr.backend != turns[0].backend || (stream && !tr.completed) {
						t.Fatalf("stream=%v turn %d through replica %d: %+v (turn 0 on %s)", stream, i, i%2, tr, turns[0].backend)
					}
				}
				t.Logf("%s, stream=%v: 10 turns alternating replicas, 0 not found, all on %s", kind, stream, turns[0].backend)
				last = turns[len(turns)-1]
			}
			holder := simByID(bs, last.backend)

			// Retrieval, input items and delete by id, through either replica.
			if got := responseByID(t, bases[1], "GET", last.id, ""); got.status != 200 || got.id != last.id || got.backend != holder.sim.ID() {
				t.Fatalf("GET through replica b: %+v", got)
			}
			if got := responseByID(t, bases[0], "GET", last.id, "/input_items"); got.status != 200 || got.backend != holder.sim.ID() {
				t.Fatalf("input_items through replica a: %+v", got)
			}

			// Cancel by id, through the other replica, while it streams.
			for _, s := range bs {
				s.sim.SetTiming(0, 20*time.Millisecond)
			}
			body := `{"model":"modelsim","input":"a long answer please","stream":true,"max_output_tokens":1000}`
			resp, err := respClient.Post(bases[0]+"/v1/responses", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(resp.Body)
			var streamID string
			for streamID == "" {
				line, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("stream ended before response.created: %v", err)
				}
				var ev struct{ Response struct{ ID string } }
				if data, ok := strings.CutPrefix(line, "data: "); ok && json.Unmarshal([]byte(data), &ev) == nil {
					streamID = ev.Response.ID
				}
			}
			cancelled := responseByID(t, bases[1], "POST", streamID, "/cancel")
			rest, _ := io.ReadAll(br)
			resp.Body.Close()
			if cancelled.status != 200 || strings.Contains(string(rest), "response.completed") {
				t.Fatalf("cancel through replica b: %+v; the stream went on to complete: %v", cancelled, strings.Contains(string(rest), "response.completed"))
			}
			for _, s := range bs {
				s.sim.SetTiming(0, 0)
			}
			if got := responseByID(t, bases[1], "DELETE", streamID, ""); got.status != 200 {
				t.Fatalf("DELETE through replica b: %+v", got)
			}
			if got := responseByID(t, bases[0], "GET", streamID, ""); got.status != 404 || got.backend == "" {
				t.Fatalf("GET of a deleted response: %+v, want the backend's 404", got)
			}

			// store: false binds nothing.
			bound := func() float64 {
				v, _ := testkit.FindMetric(a.srv.Registry(), "tether_responses_learned_total", "result", "bound")
				return v
			}
			before := bound()
			unstored := respond(t, bases[0], map[string]any{"input": "forget me", "store": false}, false)
			if unstored.status != 200 || unstored.id == "" || bound() != before {
				t.Fatalf("store: false: %+v, bindings %v -> %v", unstored, before, bound())
			}

			// The holder stops: its responses are lost, and tether says so
			// (404, OpenAI's shape) instead of asking a backend that cannot
			// know them. The first request may meet the refused connection
			// itself (502, never retried elsewhere).
			others := map[string]int64{}
			for _, s := range bs {
				others[s.sim.ID()] = s.sim.Stats().Requests
			}
			holder.srv.Close()
			lost := func(base string, send func() turn, code string) {
				t.Helper()
				for attempt := 0; ; attempt++ {
					tr := send()
					if tr.status == http.StatusNotFound {
						if tr.errCode != code || !strings.Contains(tr.errMsg, "no longer available") || tr.backend != "" {
							t.Fatalf("lost response: %+v", tr)
						}
						return
					}
					if tr.status != http.StatusBadGateway || attempt == 2 {
						t.Fatalf("attempt %d after the holder stopped: %+v", attempt, tr)
					}
				}
			}
			lost(bases[1], func() turn {
				return respond(t, bases[1], map[string]any{"input": "are you there?", "previous_response_id": last.id}, false)
			}, "previous_response_not_found")
			lost(bases[0], func() turn { return responseByID(t, bases[0], "GET", last.id, "") }, "response_not_found")
			for _, s := range bs {
				if s != holder && s.sim.Stats().Requests != others[s.sim.ID()] {
					t.Fatalf("%s served a request for a response it cannot know", s.sim.ID())
				}
			}
			if v := testkit.Metric(t, b.srv.Registry(), "tether_responses_lost_total", "pool", respPool); v < 1 {
				t.Fatalf("tether_responses_lost_total = %v", v)
			}
		})
	}
}

// The same 10-turn chain sent round robin straight to the backends, as a
// balancer without tether does: a turn that lands on another backend than
// the one holding the previous response is "not found".
func TestResponsesRoundRobinContrast(t *testing.T) {
	bs := startBackends(t, 3)
	var bases []string
	for _, b := range bs {
		bases = append(bases, b.srv.URL)
	}
	for _, stream := range []bool{false, true} {
		turns := chain(t, bases, 10, stream)
		lost := 0
		for _, tr := range turns {
			if tr.notFound() {
				lost++
			}
		}
		t.Logf("round robin over %d backends without tether, stream=%v: %d of 10 turns not found", len(bs), stream, lost)
		if lost == 0 {
			t.Fatal("round robin found every previous response: the backends do not keep responses apart")
		}
	}
}
