package sim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFaults: each fault fails completion requests its way while /health
// keeps answering, and POST /sim/fault switches faults at run time.
func TestFaults(t *testing.T) {
	s, ts := start(t, Options{DecodePerToken: time.Microsecond})
	chat := func(timeout time.Duration) (*http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/chat/completions",
			strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	setFault := func(mode string) {
		t.Helper()
		resp, err := http.Post(ts.URL+"/sim/fault?mode="+mode, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"fault":"`+mode+`"`) {
			t.Fatalf("POST /sim/fault?mode=%s: %d %s", mode, resp.StatusCode, b)
		}
	}
	health := func() {
		t.Helper()
		resp, err := http.Get(ts.URL + "/health")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("/health under fault %s: %v %v", s.Fault(), resp, err)
		}
		resp.Body.Close()
	}

	if resp, err := chat(5 * time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("no fault: %v %v", resp, err)
	}
	setFault("reset")
	if _, err := chat(5 * time.Second); err == nil {
		t.Fatal("reset: the request got a response")
	}
	health()
	setFault("hang")
	if _, err := chat(200 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hang: %v, want the client's deadline", err)
	}
	health()
	setFault("error")
	if resp, err := chat(5 * time.Second); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("error: %v %v, want 503", resp, err)
	}
	setFault("none")
	if resp, err := chat(5 * time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("healed: %v %v", resp, err)
	}
	resp, _ := http.Post(ts.URL+"/sim/fault?mode=melt", "", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown fault: %d", resp.StatusCode)
	}
	if _, err := ParseFault("melt"); err == nil {
		t.Fatal("ParseFault accepted an unknown fault")
	}
}
