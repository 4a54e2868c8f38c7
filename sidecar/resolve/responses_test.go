package resolve

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/discovery"
	"github.com/tetherproxy/tether/sidecar/reqbody"
	"github.com/tetherproxy/tether/sidecar/responses"
	"github.com/tetherproxy/tether/sidecar/store"
)

var respFields, _ = reqbody.NewFields(responses.BodyFields...)

// respReq is a POST /v1/responses with body, as the proxy hands it over.
func respReq(body string) *http.Request {
	r := httptest.NewRequest("POST", "/v1/responses", strings.NewReader(body))
	return r.WithContext(reqbody.NewContext(context.Background(), respFields.Of([]byte(body))))
}

// answer plays the backend's JSON answer carrying id through Answered
// and reads it as the proxy would.
func answer(t *testing.T, f *fixture, d *Decision, id string) {
	t.Helper()
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body:    io.NopCloser(strings.NewReader(`{"id":"` + id + `","object":"response","output":[]}`)),
		Request: httptest.NewRequest("POST", "/v1/responses", nil)}
	f.r.Answered(d, resp)
	io.ReadAll(resp.Body)
	resp.Body.Close()
}

// In a PD pool a response's binding holds the pair: the next turn goes to
// both halves; without its prefill pod, to another prefill pod of the
// decode pod's group; without its decode pod (which stored the
// response), it is lost.
func TestResponsePDPair(t *testing.T) {
	d := func(id, g string) discovery.Backend { b := be(id); b.Group = g; return b }
	src := &fakeSource{}
	// Only g1 has prefill pods: the first pair is d1 and p1 or p1b.
	src.put([]discovery.Backend{d("d1", "g1"), d("d2", "g2")}, []discovery.Backend{d("p1", "g1"), d("p1b", "g1")})
	f := newFixture(t, nil, src, true)
	first, err := f.r.Resolve(context.Background(), respReq(`{"input":"hi"}`))
	if err != nil || !first.learn || first.pinned {
		t.Fatalf("first turn: %+v, %v", first, err)
	}
	answer(t, f, first, "resp_1")
	for range 5 {
		got, err := f.r.Resolve(context.Background(), respReq(`{"input":"more","previous_response_id":"resp_1"}`))
		if err != nil || got.Backend.ID != first.Backend.ID || got.Prefill.ID != first.Prefill.ID || got.Source != SourceResponseID || !got.pinned {
			t.Fatalf("next turn: %+v, %v; first on %s/%s", got, err, first.Backend.ID, first.Prefill.ID)
		}
		// A pinned request is never retried elsewhere.
		if _, err := f.r.Retry(context.Background(), got, ReasonConnectFailed); !errors.Is(err, ErrPinned) {
			t.Fatalf("Retry of a pinned request: %v", err)
		}
		f.now = f.now.Add(20 * 1e9) // past the fail timeout the retry marked
	}
	if first.Backend.ID != "d1" {
		t.Fatalf("first pair %s/%s, want d1 (the only group with prefill)", first.Backend.ID, first.Prefill.ID)
	}
	var rest []discovery.Backend
	for _, p := range []discovery.Backend{d("p1", "g1"), d("p1b", "g1"), d("p2", "g2")} {
		if p.ID != first.Prefill.ID {
			rest = append(rest, p)
		}
	}
	src.put([]discovery.Backend{d("d1", "g1"), d("d2", "g2")}, rest)
	got, err := f.r.Resolve(context.Background(), respReq(`{"previous_response_id":"resp_1"}`))
	if err != nil || got.Backend.ID != first.Backend.ID || got.Prefill.ID == first.Prefill.ID || got.Prefill.Group != first.Backend.Group {
		t.Fatalf("without the bound prefill pod: %+v, %v", got, err)
	}
	src.put([]discovery.Backend{d("d2", "g2")}, rest)
	_, err = f.r.Resolve(context.Background(), httptest.NewRequest("GET", "/v1/responses/resp_1", nil))
	if lost, ok := errors.AsType[*responses.LostError](err); !ok || lost.ID != "resp_1" || lost.Param != "" {
		t.Fatalf("decode pod gone: %v", err)
	}
}

// store: false binds nothing; an id tether never saw routes as any
// request does.
func TestResponseNotStoredAndUnknown(t *testing.T) {
	f := newFixture(t, nil, newSource(be("a"), be("b")), false)
	d, err := f.r.Resolve(context.Background(), respReq(`{"input":"x","store":false}`))
	if err != nil || d.learn {
		t.Fatalf("store:false: %+v, %v", d, err)
	}
	f.r.Answered(d, &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"id":"resp_x","object":"response"}`))})
	got, err := f.r.Resolve(context.Background(), respReq(`{"previous_response_id":"resp_x"}`))
	if err != nil || got.pinned || got.Outcome != None {
		t.Fatalf("unknown id: %+v, %v", got, err)
	}
}

// lateStore hides every binding from the first misses lookups, as a
// gossip replica does before a peer's binding arrives.
type lateStore struct {
	store.Store
	misses int
}

func (s *lateStore) Lookup(ctx context.Context, key string, ttl time.Duration) (store.Binding, bool, error) {
	if s.misses > 0 {
		s.misses--
		return store.Binding{}, false, nil
	}
	return s.Store.Lookup(ctx, key, ttl)
}

// An id whose binding has not arrived yet is looked up again within
// ResponseGrace; without a grace it is routed as any request.
func TestResponseGrace(t *testing.T) {
	for _, tc := range []struct {
		grace  time.Duration
		pinned bool
	}{{0, false}, {100 * time.Millisecond, true}} {
		m := newMemory(t, 100)
		t.Cleanup(func() { m.Close() })
		late := &lateStore{Store: m}
		f := newFixture(t, late, newSource(be("a"), be("b"), be("c")), false)
		f.r.o.ResponseGrace = tc.grace
		first, err := f.r.Resolve(context.Background(), respReq(`{"input":"hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		answer(t, f, first, "resp_late")
		late.misses = 3
		got, err := f.r.Resolve(context.Background(), respReq(`{"previous_response_id":"resp_late"}`))
		if err != nil || got.pinned != tc.pinned || (tc.pinned && got.Backend.ID != first.Backend.ID) {
			t.Fatalf("grace %v: %+v, %v", tc.grace, got, err)
		}
	}
}
