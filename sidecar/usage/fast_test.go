package usage

import "testing"

var fastCases = []struct {
	in   string
	fast bool // fastCounts decides it
}{
	{`{"prompt_tokens":12,"total_tokens":20,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":4}}`, true},
	{`{"prompt_tokens":12,"prompt_tokens_details":null}`, true},
	{` { "input_tokens" : 7 , "input_tokens_details" : { "cached_tokens" : 0 } , "output_tokens_details" : {"reasoning_tokens":1.5e3} } `, true},
	{`{"prompt_tokens":-0,"x":"a b","y":true,"z":false,"w":null,"v":{}}`, true},
	{`{}`, true},
	{`{"Prompt_Tokens":12}`, false},                  // encoding/json folds case
	{`{"prompt_tokens":1,"prompt_tokens":2}`, false}, // the last wins there
	{`{"prompt_tokens":1.0}`, false},                 // a type error there
	{`{"prompt_tokens":9223372036854775808}`, false}, // past int64
	{`{"prompt_tokens":"12"}`, false},                // a type error
	{`{"prompt_tokens":12,"a":[1,2]}`, false},        // arrays are left to it
	{`{"prompt_tokens":12,"s":"\"q\""}`, false},      // escapes too
	{`{"prompt_tokens":012}`, false},                 // not JSON
	{`{"prompt_tokens":12,}`, false},                 // not JSON
	{`{"prompt_tokens":12} x`, false},                // not JSON
	{`{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":2}}`, false},
}

func TestFastCountsAgreesWithEncodingJSON(t *testing.T) {
	for _, c := range fastCases {
		got, ok := fastCounts([]byte(c.in))
		if ok != c.fast {
			t.Errorf("%s: fast path decided %v, want %v", c.in, ok, c.fast)
		}
		want, wantOK := jsonCounts([]byte(c.in))
		if ok && (!wantOK || got != want) {
			t.Errorf("%s: fast %+v, encoding/json %+v %v", c.in, got, want, wantOK)
		}
	}
}

// FuzzFastCounts: whatever fastCounts accepts, encoding/json reads the
// same counts from.
//
//	go test -run '^$' -fuzz FuzzFastCounts ./sidecar/usage/
func FuzzFastCounts(f *testing.F) {
	for _, c := range fastCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, ok := fastCounts(in)
		if !ok {
			return
		}
		want, wantOK := jsonCounts(in)
		if !wantOK || got != want {
			t.Fatalf("%q: fast %+v, encoding/json %+v %v", in, got, want, wantOK)
		}
	})
}

// BenchmarkParseUsage compares a vLLM usage object read by the fast path
// and by encoding/json, side by side.
//
//	go test -run '^$' -bench ParseUsage -benchmem ./sidecar/usage/
func BenchmarkParseUsage(b *testing.B) {
	in := []byte(`{"prompt_tokens":1843,"total_tokens":1899,"completion_tokens":56,"prompt_tokens_details":{"cached_tokens":1792}}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := fastCounts(in); !ok {
				b.Fatal("not read")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := jsonCounts(in); !ok {
				b.Fatal("not read")
			}
		}
	})
}
