package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestScanPaths(t *testing.T) {
	p := MustCompile("model", "user", "metadata.session_id", "store", "metadata", "a.b.c")
	type want map[string]Value
	str := func(s string) Value { return Value{Kind: String, Str: s} }
	for _, tc := range []struct {
		name, doc string
		object    bool
		want      want
	}{
		{"flat", `{"model":"m","user":"u-1","store":false}`, true,
			want{"model": str("m"), "user": str("u-1"), "store": {Kind: False}}},
		{"nested", `{"metadata":{"x":[1,{"session_id":"no"}],"session_id":"s\u00e9"}}`, true,
			want{"metadata": {Kind: Object}, "metadata.session_id": str("sé")}},
		{"escaped key", `{"mod\u0065l":"m2"}`, true, want{"model": str("m2")}},
		{"repeated key: last wins", `{"metadata":{"session_id":"a"},"metadata":5}`, true,
			want{"metadata": {Kind: Number}}},
		{"not a string", `{"user":12,"model":null,"store":true}`, true,
			want{"user": {Kind: Number}, "model": {Kind: Null}, "store": {Kind: True}}},
		{"inside arrays never", `{"x":[{"model":"no"}],"a":{"b":{"c":"deep"}}}`, true,
			want{"a.b.c": str("deep")}},
		{"too long", `{"user":"` + strings.Repeat("x", 17) + `"}`, true,
			want{"user": {Kind: String, TooLong: true}}},
		{"at the limit", `{"user":"` + strings.Repeat("x", 16) + `"}`, true,
			want{"user": str(strings.Repeat("x", 16))}},
		{"top-level array", `[{"model":"m"}]`, false, want{}},
		{"truncated", `{"model":"m","user":"u`, false, want{"model": str("m")}},
		{"trailing garbage", `{"model":"m"} x`, false, want{"model": str("m")}},
		{"bad number", `{"model":"m","n":01}`, false, want{"model": str("m")}},
		{"empty", ``, false, want{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := p.Scan([]byte(tc.doc), 16)
			if s.IsObject() != tc.object {
				t.Errorf("IsObject = %v, want %v", s.IsObject(), tc.object)
			}
			for i := range p.Len() {
				if got, w := s.Value(i), tc.want[p.Path(i)]; got != w {
					t.Errorf("%s = %+v, want %+v", p.Path(i), got, w)
				}
			}
		})
	}
}

func TestValidatePath(t *testing.T) {
	for _, bad := range []string{"", ".a", "a.", "a..b", strings.Repeat("a.", 8) + "a", strings.Repeat("x", 257)} {
		if ValidatePath(bad) == nil {
			t.Errorf("ValidatePath(%q) accepted", bad)
		}
	}
	for _, good := range []string{"user", "metadata.session_id", "a-b.c_d.e f"} {
		if err := ValidatePath(good); err != nil {
			t.Errorf("ValidatePath(%q): %v", good, err)
		}
	}
}

// FuzzScan checks the scanner against encoding/json: it accepts exactly
// the valid documents, reports at every path what json.Unmarshal into a
// map puts there, and reads a document fed in two pieces as it reads it
// whole.
func FuzzScan(f *testing.F) {
	f.Add([]byte(`{"model":"m","metadata":{"session_id":"s"},"user":"u"}`), "metadata.session_id", 3)
	f.Add([]byte(`{"a":{"b":"\ud83d\ude00"},"a":{"b":"x\n"}}`), "a.b", 9)
	f.Add([]byte(`{"user":-0.5e+3,"model":[true,false,null]}`), "user", 1)
	f.Add([]byte(`{"\u0075ser":"\xff\xfe","store":false} `), "store", 12)
	f.Add([]byte(`{"x":"a\"b\\c\/\b\f\r\t\u0041"}`), "x", 5)
	f.Add([]byte(`1e5`), "x", 2)
	f.Fuzz(func(t *testing.T, doc []byte, path string, split int) {
		paths := []string{"model", "user", "metadata.session_id", "store"}
		if ValidatePath(path) == nil {
			paths = append(paths, path)
		}
		p := MustCompile(paths...)
		const limit = 8
		whole := p.Scan(doc, limit)
		pieces := p.NewScanner(limit)
		if len(doc) > 0 {
			k := (split%len(doc) + len(doc)) % len(doc)
			pieces.Write(doc[:k])
			pieces.Write(doc[k:])
		}
		if whole.Done() != pieces.Done() || whole.IsObject() != pieces.IsObject() {
			t.Fatalf("whole: done %v object %v; in pieces: done %v object %v",
				whole.Done(), whole.IsObject(), pieces.Done(), pieces.IsObject())
		}
		for i := range p.Len() {
			if whole.Value(i) != pieces.Value(i) {
				t.Fatalf("%s: whole %+v, in pieces %+v", p.Path(i), whole.Value(i), pieces.Value(i))
			}
		}
		valid := json.Valid(doc)
		if whole.Done() != valid {
			t.Fatalf("Done = %v, json.Valid = %v", whole.Done(), valid)
		}
		if !valid {
			return
		}
		var top any
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber() // a valid 1e700 does not fit a float64
		if err := dec.Decode(&top); err != nil {
			t.Fatalf("valid document does not decode: %v", err)
		}
		_, isObj := top.(map[string]any)
		if whole.IsObject() != isObj {
			t.Fatalf("IsObject = %v, want %v", whole.IsObject(), isObj)
		}
		for i := range p.Len() {
			want := Value{}
			if isObj {
				want = expect(top, strings.Split(p.Path(i), "."), limit)
			}
			if got := whole.Value(i); got != want {
				t.Fatalf("%s = %+v, encoding/json says %+v", p.Path(i), got, want)
			}
		}
	})
}

// expect is the Value encoding/json's decoding holds at path.
func expect(v any, path []string, limit int) Value {
	for _, seg := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return Value{}
		}
		if v, ok = m[seg]; !ok {
			return Value{}
		}
	}
	switch x := v.(type) {
	case string:
		if len(x) > limit {
			return Value{Kind: String, TooLong: true}
		}
		return Value{Kind: String, Str: x}
	case json.Number:
		return Value{Kind: Number}
	case bool:
		if x {
			return Value{Kind: True}
		}
		return Value{Kind: False}
	case nil:
		return Value{Kind: Null}
	case map[string]any:
		return Value{Kind: Object}
	case []any:
		return Value{Kind: Array}
	}
	return Value{}
}

func BenchmarkScan(b *testing.B) {
	msg := strings.Repeat("a conversation turn with some words ", 200)
	doc := []byte(`{"model":"m","messages":[` + strings.Repeat(`{"role":"user","content":"`+msg+`"},`, 20) +
		`{"role":"user","content":"x"}],"metadata":{"session_id":"s-1"},"stream":true}`)
	p := MustCompile("model", "metadata.session_id", "previous_response_id", "store")
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	s := p.NewScanner(4096)
	for b.Loop() {
		s.Reset()
		s.Write(doc)
	}
}
