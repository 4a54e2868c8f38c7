package usage

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// Responses as vLLM and SGLang send them (trimmed to the fields that
// matter plus enough around them to exercise the scanner).
const (
	vllmChat = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"the \"usage\": {\"prompt_tokens\": 9} of it"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":1200,"total_tokens":1210,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":1184}},"prompt_logprobs":null}`
	vllmCompletion = `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x","logprobs":null}],` +
		`"usage":{"prompt_tokens":40,"total_tokens":41,"completion_tokens":1,"prompt_tokens_details":null}}`
	sglangChat = `{"id":"1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},` +
		`"matched_stop":2,"usage":{"prompt_tokens":5}}],"usage":{"prompt_tokens":300,"completion_tokens":2,"total_tokens":302,"prompt_tokens_details":{"cached_tokens":256},"reasoning_tokens":0}}`
	noUsage = `{"id":"x","choices":[{"message":{"content":"usage"}}]}`
)

// vLLM's stream with stream_options.include_usage: chunks carry no usage
// (or null), the last chunk before [DONE] has empty choices and the usage.
const vllmStream = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":null}\n\n" +
	"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi {\"}}]}\n\n" +
	": keep-alive comment with \"usage\":{\"prompt_tokens\":1}\n\n" +
	"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":812,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":800}}}\n\n" +
	"data: [DONE]\n\n"

func scanAll(stream bool, chunks ...string) (Usage, bool) {
	var s Scanner
	s.Reset(stream)
	for _, c := range chunks {
		s.Write([]byte(c))
	}
	return s.Usage()
}

func TestBodies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		in     string
		want   Usage
		found  bool
	}{
		{"vLLM chat completion", false, vllmChat, Usage{1200, 1184, true}, true},
		{"vLLM completion without details", false, vllmCompletion, Usage{40, 0, false}, true},
		{"SGLang: nested usage ignored", false, sglangChat, Usage{300, 256, true}, true},
		{"no usage", false, noUsage, Usage{}, false},
		{"usage null", false, `{"usage":null}`, Usage{}, false},
		{"usage a string", false, `{"usage":"{\"prompt_tokens\":3}"}`, Usage{}, false},
		{"usage without prompt_tokens", false, `{"usage":{"completion_tokens":3}}`, Usage{}, false},
		{"negative prompt tokens", false, `{"usage":{"prompt_tokens":-1}}`, Usage{}, false},
		{"cached above prompt is clamped", false, `{"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":16}}}`, Usage{10, 10, true}, true},
		{"escaped key is not usage", false, `{"us\u0061ge":{"prompt_tokens":3}}`, Usage{}, false},
		{"key usage inside an array", false, `["usage",{"prompt_tokens":3}]`, Usage{}, false},
		{"truncated body", false, vllmChat[:len(vllmChat)-60], Usage{}, false},
		{"Responses API: input_tokens", false, `{"id":"resp_1","object":"response","usage":{"input_tokens":90,"input_tokens_details":{"cached_tokens":64},"output_tokens":3}}`, Usage{90, 64, true}, true},
		{"whitespace", false, "{ \"usage\" :\n { \"prompt_tokens\" : 7 } }", Usage{7, 0, false}, true},
		{"vLLM stream with include_usage", true, vllmStream, Usage{812, 800, true}, true},
		{"stream without usage", true, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n", Usage{}, false},
		{"stream with CRLF", true, strings.ReplaceAll(vllmStream, "\n", "\r\n"), Usage{812, 800, true}, true},
		{"continuous usage: the last wins", true,
			"data: {\"usage\":{\"prompt_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n" +
				"data: {\"usage\":{\"prompt_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":4}}}\n\n", Usage{5, 4, true}, true},
		{"a data line cut by a newline does not leak into the next", true,
			"data: {\"x\":\"a\ndata: {\"usage\":{\"prompt_tokens\":2}}\n\n", Usage{2, 0, false}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found := scanAll(tc.stream, tc.in)
			if got != tc.want || found != tc.found {
				t.Fatalf("got %+v, %v; want %+v, %v", got, found, tc.want, tc.found)
			}
			// The same bytes in any split give the same answer: backends
			// flush at arbitrary boundaries.
			for cut := 1; cut < len(tc.in); cut++ {
				g, f := scanAll(tc.stream, tc.in[:cut], tc.in[cut:])
				if g != got || f != found {
					t.Fatalf("split at %d: got %+v, %v; whole gave %+v, %v", cut, g, f, got, found)
				}
			}
			var s Scanner
			s.Reset(tc.stream)
			for i := range len(tc.in) {
				s.Write([]byte{tc.in[i]})
			}
			if g, f := s.Usage(); g != got || f != found {
				t.Fatalf("byte by byte: got %+v, %v; whole gave %+v, %v", g, f, got, found)
			}
		})
	}
}

func TestResetForgetsTheLastResponse(t *testing.T) {
	var s Scanner
	s.Reset(false)
	s.Write([]byte(vllmChat))
	s.Reset(false)
	s.Write([]byte(`{"usage":{"prompt`)) // cut off
	s.Reset(true)
	s.Write([]byte("data: {\"choices\":[]}\n\n"))
	if u, ok := s.Usage(); ok {
		t.Fatalf("after Reset: %+v", u)
	}
}

func TestOversizedUsageIgnoredAndMemoryBounded(t *testing.T) {
	pad := strings.Repeat(`"x":1,`, 1000)
	in := `{"usage":{` + pad + `"prompt_tokens":3}}`
	var s Scanner
	s.Reset(false)
	s.Write([]byte(in))
	if u, ok := s.Usage(); ok {
		t.Fatalf("usage of %d bytes accepted: %+v", len(in), u)
	}
	if cap(s.buf) > 2*maxUsageBytes {
		t.Fatalf("kept a buffer of %d bytes", cap(s.buf))
	}
	// Still finds a usage report after the oversized one.
	s.Reset(true)
	s.Write([]byte("data: " + in + "\n\ndata: {\"usage\":{\"prompt_tokens\":4}}\n\n"))
	if u, ok := s.Usage(); !ok || u.PromptTokens != 4 {
		t.Fatalf("got %+v, %v", u, ok)
	}
}

// reference finds the same thing the slow way: decode each document with
// encoding/json and take the last top-level "usage" object of at most
// maxUsageBytes that parses with prompt_tokens.
func reference(stream bool, in []byte) (Usage, bool) {
	var docs [][]byte
	if !stream {
		docs = [][]byte{in}
	} else {
		for _, line := range bytes.Split(in, []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				docs = append(docs, d)
			}
		}
	}
	var last Usage
	found := false
	for _, d := range docs {
		var s Scanner // parse() applies the acceptance rule to one object
		dec := json.NewDecoder(bytes.NewReader(d))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			continue
		}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				break
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				break
			}
			if k == "usage" && len(raw) > 0 && raw[0] == '{' && len(raw) <= maxUsageBytes {
				s.buf = append(s.buf[:0], raw...)
				s.parse()
			}
		}
		if u, ok := s.Usage(); ok {
			last, found = u, true
		}
	}
	return last, found
}

func FuzzScanner(f *testing.F) {
	for _, in := range []string{vllmChat, vllmCompletion, sglangChat, noUsage, vllmStream} {
		f.Add([]byte(in), false, 7)
		f.Add([]byte(in), true, 13)
	}
	f.Fuzz(func(t *testing.T, in []byte, stream bool, cut int) {
		whole, wf := scanAll(stream, string(in))
		if cut < 0 {
			cut = -cut
		}
		if len(in) > 0 {
			cut %= len(in)
			if g, f := scanAll(stream, string(in[:cut]), string(in[cut:])); g != whole || f != wf {
				t.Fatalf("split at %d: %+v %v vs %+v %v", cut, g, f, whole, wf)
			}
		}
		if wf && (whole.PromptTokens < 0 || whole.CachedTokens < 0 || whole.CachedTokens > whole.PromptTokens) {
			t.Fatalf("impossible usage %+v", whole)
		}
		// Against encoding/json, on documents it accepts as a whole (on
		// broken JSON the scanner's answer is a best effort). encoding/json
		// decodes \u escapes in keys, which the scanner does not (no server
		// escapes "usage"), so those inputs are left out.
		valid := json.Valid(in) && !bytes.Contains(in, []byte(`\u`))
		if stream {
			valid = !bytes.Contains(in, []byte("\r"))
			for _, line := range bytes.Split(in, []byte("\n")) {
				if d, ok := bytes.CutPrefix(line, []byte("data:")); ok && !json.Valid(d) {
					valid = false
				}
			}
		}
		if valid {
			if g, f := reference(stream, in); g != whole || f != wf {
				t.Fatalf("scanner %+v %v, encoding/json %+v %v", whole, wf, g, f)
			}
		}
	})
}

// BenchmarkStreamEvent is the added cost per SSE event of a streamed chat
// completion: what reading usage costs each token the proxy forwards.
//
//	go test -run '^$' -bench . -benchmem ./sidecar/usage/
func BenchmarkStreamEvent(b *testing.B) {
	event := []byte("data: {\"id\":\"chatcmpl-5b7c\",\"object\":\"chat.completion.chunk\",\"created\":1733000000,\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n")
	var s Scanner
	s.Reset(true)
	b.SetBytes(int64(len(event)))
	b.ReportAllocs()
	for b.Loop() {
		s.Write(event)
	}
}

// BenchmarkBody is the cost of finding usage in a non-streamed completion.
func BenchmarkBody(b *testing.B) {
	body := []byte(vllmChat)
	var s Scanner
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		s.Reset(false)
		s.Write(body)
	}
}

func TestQuoteOrBackslash(t *testing.T) {
	for in, want := range map[string]int{
		``: -1, `abc`: -1, `"`: 0, `\`: 0, `ab"c\`: 2, `ab\c"`: 2, `\"`: 0, `"\`: 0,
		strings.Repeat("x", 100) + `\` + `"`: 100,
		// Past the plain loop's first 16 bytes, the vectorised searches.
		strings.Repeat("x", 16): -1, strings.Repeat("x", 20): -1,
		strings.Repeat("x", 20) + `"`: 20, strings.Repeat("x", 16) + `\`: 16,
		strings.Repeat("x", 15) + `"`: 15, strings.Repeat("x", 30) + `"\`: 30,
	} {
		if got := quoteOrBackslash([]byte(in)); got != want {
			t.Errorf("quoteOrBackslash(%q) = %d, want %d", in, got, want)
		}
	}
}
