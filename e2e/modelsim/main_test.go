package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startRun runs the command with args until ctx ends. It returns its
// standard output, where it prints a line per listener, and the channel
// run's result arrives on.
func startRun(ctx context.Context, args []string, stderr io.Writer) (*bufio.Reader, <-chan error) {
	out, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, args, outW, stderr)
		outW.Close()
	}()
	return bufio.NewReader(out), done
}

// The process prints its real address once listening, serves, and shuts
// down when its context (the signal, in main) ends; it logs a line per
// completion unless told not to.
func TestRunListensServesAndShutsDown(t *testing.T) {
	for _, logRequests := range []bool{true, false} {
		t.Run(fmt.Sprint("log-requests=", logRequests), func(t *testing.T) {
			testRunListensServesAndShutsDown(t, logRequests)
		})
	}
}

func testRunListensServesAndShutsDown(t *testing.T, logRequests bool) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var logs strings.Builder
	out, done := startRun(ctx, []string{"--listen", "127.0.0.1:0", "--model", "m", "--prefill-per-token", "0", "--decode-per-token", "0",
		fmt.Sprint("--log-requests=", logRequests)}, &logs)

	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("no listening line: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 5 || f[0] != "modelsim" || f[2] != "listening" || f[1] != f[4] || strings.HasSuffix(f[4], ":0") {
		t.Fatalf("listening line %q", line)
	}
	addr := f[4]

	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a b","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		SystemFingerprint string `json:"system_fingerprint"`
		Model             string `json:"model"`
	}
	err = json.NewDecoder(resp.Body).Decode(&a)
	resp.Body.Close()
	if err != nil || a.SystemFingerprint != addr || a.Model != "m" || resp.Header.Get("X-Modelsim-Id") != addr {
		t.Fatalf("answer %+v %v", a, err)
	}
	http.DefaultClient.CloseIdleConnections()

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if strings.Contains(logs.String(), `"msg":"completion"`) != logRequests || !strings.Contains(logs.String(), `"msg":"shutting down"`) ||
		!strings.Contains(logs.String(), `"msg":"listening"`) {
		t.Fatalf("logs %s", logs.String())
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--block-tokens", "0"},
		{"--cache-blocks", "-1"},
		{"--max-running", "0"},
		{"--decode-per-token", "-1ms"},
		{"--fault", "melt"},
		{"--nope"},
		{"extra"},
		{"--listen", "127.0.0.1:0,127.0.0.1:0", "--id", "only-one"},
	} {
		if err := run(t.Context(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

// A stream still open when the drain time is over is cut, so that shutdown
// never hangs on a long generation.
func TestShutdownCutsStreamsAfterDrainTime(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out, done := startRun(ctx, []string{"--listen", "127.0.0.1:0", "--id", "x", "--prefill-per-token", "0",
		"--decode-per-token", "1h", "--shutdown-timeout", "10ms"}, io.Discard)
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.Fields(line)[4]
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a","max_tokens":2,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if first, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(first, "data: {") {
		t.Fatalf("first event %q %v", first, err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if _, err := io.ReadAll(r); err == nil {
		t.Fatal("the cut stream ended cleanly")
	}
}

// Several --listen addresses are as many backends in one process: each
// has its own identity and its own prefix cache, so a prompt cached on
// one is a miss on the other.
func TestRunServesOneBackendPerListenAddress(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	lines, done := startRun(ctx, []string{"--listen", "127.0.0.1:0,127.0.0.1:0", "--id", "b0,b1",
		"--prefill-per-token", "0", "--decode-per-token", "0"}, io.Discard)
	addrs := map[string]string{}
	for range 2 {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("listening lines: %v", err)
		}
		f := strings.Fields(line)
		addrs[f[1]] = f[4]
	}
	if len(addrs) != 2 || addrs["b0"] == "" || addrs["b1"] == "" || addrs["b0"] == addrs["b1"] {
		t.Fatalf("listening on %v", addrs)
	}

	prompt := strings.Repeat("w ", 64)
	complete := func(id string) (servedBy string, cached int) {
		t.Helper()
		resp, err := http.Post("http://"+addrs[id]+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"`+prompt+`","max_tokens":1}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatal(err)
		}
		return resp.Header.Get("X-Modelsim-Id"), a.Usage.Details.Cached
	}
	if by, cached := complete("b0"); by != "b0" || cached != 0 {
		t.Fatalf("first prompt on b0: served by %q, %d cached", by, cached)
	}
	if by, cached := complete("b0"); by != "b0" || cached == 0 {
		t.Fatalf("second prompt on b0: served by %q, %d cached (want a hit)", by, cached)
	}
	if by, cached := complete("b1"); by != "b1" || cached != 0 {
		t.Fatalf("the prompt on b1: served by %q, %d cached (b1's cache is its own)", by, cached)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
