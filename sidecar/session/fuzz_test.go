package session

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/jsonscan"
	"github.com/tetherproxy/tether/sidecar/reqbody"
)

// FuzzExtract builds requests from arbitrary header, query, cookie and
// Authorization values and sources in arbitrary order. Extract must never
// panic, and the key must be empty or one of the request's own values, of
// the kind the returned source type reads, and within MaxKeyBytes.
func FuzzExtract(f *testing.F) {
	f.Add("X-Session-ID", "h", "session_id", "session_id=q&x=1", "sid", "sid=c; a=b", "Bearer valid-1", uint8(0))
	f.Add("x-session-id", "", "s", "%zz&s=1;2", "sid", `sid="c"`, "bearer valid-", uint8(5))
	f.Add("Cookie", "sid=h", "", "=&=&", "", "=; ;", "Bearer", uint8(23))
	f.Add("Authorization", "Bearer valid-x", "s", "s=%", "s", "s=; s=2", "", uint8(17))
	f.Fuzz(func(t *testing.T, hname, hval, qname, rawQuery, cname, cookie, auth string, order uint8) {
		srcs := []config.Source{
			{Type: config.SourceHeader, Name: hname},
			{Type: config.SourceQuery, Name: qname},
			{Type: config.SourceCookie, Name: cname},
			{Type: config.SourceJWTClaim, Name: "sub"},
		}
		// order picks one of the 24 permutations.
		perm := int(order) % 24
		for i := len(srcs) - 1; i > 0; i-- {
			j := perm % (i + 1)
			perm /= i + 1
			srcs[i], srcs[j] = srcs[j], srcs[i]
		}
		r := &http.Request{Header: http.Header{}, URL: &url.URL{RawQuery: rawQuery}}
		r.Header.Add(hname, hval)
		r.Header.Add("Cookie", cookie)
		r.Header.Add("Authorization", auth)
		reader := &fakeMulti{fakeClaims{claims: map[string]string{"sub": auth}}}

		k := NewExtractor(srcs, reader).Extract(r)
		key, typ := k.Value, k.Source
		if (key == "") != (typ == "") {
			t.Fatalf("key %q with type %q", key, typ)
		}
		if key == "" {
			return
		}
		if len(key) > MaxKeyBytes {
			t.Fatalf("key of %d bytes", len(key))
		}
		var from []string
		switch typ {
		case config.SourceHeader:
			from = r.Header.Values(hname)
		case config.SourceQuery:
			q, _ := url.ParseQuery(rawQuery)
			from = q[qname]
		case config.SourceCookie:
			for _, c := range r.Cookies() {
				if c.Name == cname {
					from = append(from, c.Value)
				}
			}
		case config.SourceJWTClaim:
			from = []string{auth} // the fake's only claim value
		default:
			t.Fatalf("unknown source type %q", typ)
		}
		if !slices.Contains(from, key) {
			t.Fatalf("%s key %q is none of the request's values %q", typ, key, from)
		}
	})
}

// FuzzBodySource: a Body source yields the string encoding/json finds at
// its path in the body, within MaxKeyBytes, or nothing.
func FuzzBodySource(f *testing.F) {
	f.Add([]byte(`{"metadata":{"session_id":"s-1"},"user":"u"}`), "metadata.session_id")
	f.Add([]byte(`{"prompt_cache_key":"k","prompt_cache_key":7}`), "prompt_cache_key")
	f.Add([]byte(`{"user":"\u00e9\ud800"}`), "user")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		if jsonscan.ValidatePath(path) != nil {
			return
		}
		fields, err := reqbody.NewFields(path)
		if err != nil {
			t.Fatal(err)
		}
		r := &http.Request{Header: http.Header{}, URL: &url.URL{}}
		r = r.WithContext(reqbody.NewContext(context.Background(), fields.Of(body)))
		k := NewExtractor([]config.Source{{Type: config.SourceBody, Name: path}}, nil).Extract(r)
		var want string
		var doc any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber() // a valid 1e700 does not fit a float64
		if dec.Decode(&doc) == nil && json.Valid(body) {
			v := doc
			for _, seg := range strings.Split(path, ".") {
				m, _ := v.(map[string]any)
				v = m[seg]
			}
			if s, ok := v.(string); ok && len(s) <= MaxKeyBytes {
				want = s
			}
		}
		if k.Value != want || (want != "") != (k.Source == config.SourceBody) {
			t.Fatalf("key %q from %s, want %q", k.Value, k.Source, want)
		}
	})
}
