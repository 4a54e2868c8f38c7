package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tetherproxy/tether/sidecar/resolve"
)

// slowBackend answers after reading the request body: headers after
// headerDelay, then the body "ok" after bodyDelay.
func slowBackend(t *testing.T, headerDelay, bodyDelay time.Duration) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		time.Sleep(headerDelay)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		time.Sleep(bodyDelay)
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// trickle is a request body that takes about n*step to send.
type trickle struct {
	n    int
	step time.Duration
}

func (b *trickle) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(b.step)
	b.n--
	p[0] = 'x'
	return 1, nil
}

func roundTrip(t *testing.T, ctx context.Context, rt http.RoundTripper, url string, body io.Reader) (string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestHeaderTimeout: the bound is on the response headers, counted from
// the request having been written; the body may take longer.
func TestHeaderTimeout(t *testing.T) {
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	rt := func(d time.Duration) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) { return withHeaderTimeout(r, d, base.RoundTrip) })
	}
	ctx := context.Background()

	late := slowBackend(t, 600*time.Millisecond, 0)
	_, err := roundTrip(t, ctx, rt(150*time.Millisecond), late, strings.NewReader("{}"))
	if !isTimeout(err) || !errors.As(err, new(headerTimeoutError)) {
		t.Fatalf("headers after the timeout: %v, want a header timeout", err)
	}
	if got, err := roundTrip(t, ctx, rt(0), late, strings.NewReader("{}")); err != nil || got != "ok" {
		t.Fatalf("no timeout: %q, %v", got, err)
	}

	longBody := slowBackend(t, 0, 600*time.Millisecond)
	if got, err := roundTrip(t, ctx, rt(150*time.Millisecond), longBody, strings.NewReader("{}")); err != nil || got != "ok" {
		t.Fatalf("a body longer than the timeout: %q, %v", got, err)
	}
	// Sending the request is not counted: a body that takes longer than
	// the timeout to send, answered at once, succeeds.
	if got, err := roundTrip(t, ctx, rt(150*time.Millisecond), longBody, &trickle{n: 6, step: 100 * time.Millisecond}); err != nil || got != "ok" {
		t.Fatalf("a request slower to send than the timeout: %q, %v", got, err)
	}
}

// TestDecisionTimeoutOverridesPool: a decision's Timeout (a ModelServer's
// trafficPolicy.timeout) replaces the pool's first-byte timeout, longer
// or shorter; without one the pool's applies.
func TestDecisionTimeoutOverridesPool(t *testing.T) {
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	late := slowBackend(t, 500*time.Millisecond, 0)
	for _, tc := range []struct {
		pool, decision time.Duration
		timeout        bool
	}{
		{pool: 100 * time.Millisecond, timeout: true},
		{pool: 100 * time.Millisecond, decision: 5 * time.Second},
		{pool: 5 * time.Second, decision: 100 * time.Millisecond, timeout: true},
		{pool: 5 * time.Second},
	} {
		rt := firstByteTransport{base: base, pool: &Pool{FirstByteTimeout: tc.pool}}
		x := &exchange{d: &resolve.Decision{Timeout: tc.decision}}
		ctx := context.WithValue(context.Background(), exchangeKey{}, x)
		_, err := roundTrip(t, ctx, rt, late, strings.NewReader("{}"))
		if isTimeout(err) != tc.timeout || (!tc.timeout && err != nil) {
			t.Errorf("pool %s, decision %s: %v, want timeout=%v", tc.pool, tc.decision, err, tc.timeout)
		}
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
