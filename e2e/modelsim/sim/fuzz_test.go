package sim

import (
	"testing"
)

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi there"}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a b"},{"type":"image_url","image_url":{"url":"x"}}]},{"role":"assistant","content":null}]}`,
		`{"prompt":"a b c","max_tokens":99999}`,
		`{"prompt":[1,2,3],"max_completion_tokens":3}`,
		`{"prompt":["one"]}`,
		`{"prompt":[[1,2]]}`,
		`{"messages":"x"}`,
		`{`, `null`, `[]`, `{"max_tokens":-1}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		kind := Completion
		if chat {
			kind = Chat
		}
		r, err := ParseRequest(body, kind)
		if err != nil {
			if r != nil {
				t.Fatal("request with an error")
			}
			return
		}
		if r.MaxTokens < 1 || r.MaxTokens > MaxOutputTokens {
			t.Fatalf("max tokens %d", r.MaxTokens)
		}
		for _, tok := range r.Tokens {
			if tok == "" {
				t.Fatal("empty token")
			}
		}
		// The simulation's pure steps must hold for any parsed request.
		c := newPrefixCache(4)
		hs := c.hashes(r.Tokens, 3)
		c.insert(hs)
		if got := c.match(hs, len(hs)); got > len(hs) || c.len() > 4 {
			t.Fatalf("match %d of %d, cache %d", got, len(hs), c.len())
		}
	})
}
