package sim

import (
	"slices"
	"strings"
	"testing"
)

func TestParseRequest(t *testing.T) {
	for _, c := range []struct {
		name      string
		kind      Kind
		body      string
		tokens    string
		maxTokens int
		stream    bool
		usage     bool
	}{
		{"chat string content", Chat, `{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi  there"}]}`,
			"system: be brief user: hi there", DefaultMaxTokens, false, false},
		{"chat content parts, non-text ignored", Chat,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"a b"},{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"c"}]}]}`,
			"user: a b c", DefaultMaxTokens, false, false},
		{"assistant with null content", Chat, `{"messages":[{"role":"assistant","content":null,"tool_calls":[]},{"role":"user","content":"x"}]}`,
			"assistant: user: x", DefaultMaxTokens, false, false},
		{"max_completion_tokens wins", Chat, `{"messages":[{"role":"user","content":"x"}],"max_tokens":3,"max_completion_tokens":5}`,
			"user: x", 5, false, false},
		{"max_tokens clamped", Completion, `{"prompt":"x","max_tokens":100000}`, "x", MaxOutputTokens, false, false},
		{"stream with usage", Completion, `{"prompt":"x y","stream":true,"stream_options":{"include_usage":true},"temperature":0.2}`,
			"x y", DefaultMaxTokens, true, true},
		{"prompt of one string", Completion, `{"prompt":["p q"]}`, "p q", DefaultMaxTokens, false, false},
		{"prompt of token ids", Completion, `{"prompt":[101,7,7]}`, "101 7 7", DefaultMaxTokens, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := ParseRequest([]byte(c.body), c.kind)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Tokens, strings.Fields(c.tokens)) || r.MaxTokens != c.maxTokens ||
				r.Stream != c.stream || r.IncludeUsage != c.usage {
				t.Fatalf("got %+v", r)
			}
		})
	}
}

// A conversation's earlier turn tokenizes to a prefix of its next turn.
func TestTurnIsPrefixOfNextTurn(t *testing.T) {
	t1, err := ParseRequest([]byte(`{"messages":[{"role":"user","content":"one two"}]}`), Chat)
	if err != nil {
		t.Fatal(err)
	}
	t2, err := ParseRequest([]byte(`{"messages":[{"role":"user","content":"one two"},{"role":"assistant","content":"three"},{"role":"user","content":"four"}]}`), Chat)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(t2.Tokens[:len(t1.Tokens)], t1.Tokens) {
		t.Fatalf("%q is not a prefix of %q", t1.Tokens, t2.Tokens)
	}
}
