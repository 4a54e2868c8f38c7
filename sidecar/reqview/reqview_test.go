package reqview_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tetherproxy/tether/sidecar/config"
	"github.com/tetherproxy/tether/sidecar/httphead"
	"github.com/tetherproxy/tether/sidecar/reqview"
	"github.com/tetherproxy/tether/sidecar/session"
)

// heads are requests of the shapes routing reads: session keys in a
// header (in several spellings), the query, cookies (several fields,
// quoted, repeated names) and a bearer token, and fields routing does
// not read.
var heads = []string{
	"POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nX-Session-ID: s1\r\nContent-Length: 2\r\n\r\n{}",
	"GET /v1/models?session=q1&session=q2&x=%zz HTTP/1.1\r\nHost: r\r\nx-session-id: lower\r\nX-SESSION-ID: upper\r\n\r\n",
	"POST /v1/responses HTTP/1.1\r\nHost: r\r\nCookie: a=1; sid=c1\r\nCookie: sid=c2\r\nAuthorization: Bearer valid-t\r\n\r\n",
	"GET /v1/responses/resp_1 HTTP/1.1\r\nHost: r\r\nCookie: sid=\"quoted\"; bad name=x; sid=later\r\nPragma: no-cache\r\n\r\n",
	"DELETE /a%2Fb/c?session= HTTP/1.1\r\nHost: r\r\nAuthorization: bearer  valid-u \r\nX-Session-Id:\r\nX-Session-Id: second\r\n\r\n",
	"GET http://other/p?q=1 HTTP/1.1\r\nHost: r\r\nCookie: =x; sid\r\nCookie: sid=\r\n\r\n",
}

// FuzzViewsAgree: on every head httphead takes, a view over its field
// list reads what a view over net/http's request reads, field by field
// and cookie by cookie, and an extractor with every source type finds
// the same key through either.
//
//	go test -run '^$' -fuzz FuzzViewsAgree ./sidecar/reqview/
func FuzzViewsAgree(f *testing.F) {
	for i, h := range heads {
		f.Add([]byte(h), uint8(i))
	}
	f.Fuzz(func(t *testing.T, raw []byte, order uint8) {
		req, head, fields, ok := parse(t, raw)
		if !ok {
			return
		}
		checkAgree(t, raw, reqview.OfRequest(req), head, fields)
		for _, e := range extractors(order) {
			if a, b := e.ExtractFrom(reqview.OfRequest(req)), e.ExtractFrom(head); a != b {
				t.Fatalf("%q: key %+v through net/http's request, %+v through the field list", raw, a, b)
			}
		}
	})
}

// parse reads raw twice, by httphead: into net/http's request with its
// header map, and Listed, into a Head over its field list.
func parse(t *testing.T, raw []byte) (req *http.Request, head *reqview.Head, fields []httphead.Field, ok bool) {
	t.Helper()
	req, _, ok = httphead.Request(raw)
	p := httphead.Requests{Listed: true}
	listed, _, okl := p.Request(raw)
	if ok != okl {
		t.Fatalf("%q: taken %v, listed %v", raw, ok, okl)
	}
	if !ok {
		return nil, nil, nil, false
	}
	fields, ok = p.Fields(listed)
	if !ok {
		t.Fatalf("%q: taken but not listed", raw)
	}
	head = new(reqview.Head)
	head.Reset(listed.Method, listed.URL, fields, nil)
	return req, head, fields, true
}

func TestViewsAgree(t *testing.T) {
	for _, h := range heads {
		req, head, fields, ok := parse(t, []byte(h))
		if !ok {
			t.Fatalf("declined: %q", h)
		}
		checkAgree(t, []byte(h), reqview.OfRequest(req), head, fields)
	}
}

// TestViewsRead: what each view reads of one request, by value (the
// agreement of two views that both read nothing would prove nothing).
func TestViewsRead(t *testing.T) {
	req, head, _, ok := parse(t, []byte(heads[2]))
	if !ok {
		t.Fatal("declined")
	}
	for _, v := range []reqview.View{reqview.OfRequest(req), head} {
		if v.Method() != "POST" || v.Path() != "/v1/responses" || v.RawQuery() != "" {
			t.Errorf("%T: %s %s ? %s", v, v.Method(), v.Path(), v.RawQuery())
		}
		if got := v.Header("Authorization"); got != "Bearer valid-t" {
			t.Errorf("%T: Authorization %q", v, got)
		}
		if got, ok := v.Cookie("sid"); got != "c1" || !ok {
			t.Errorf("%T: cookie sid %q, %v", v, got, ok)
		}
		if _, ok := v.Cookie("none"); ok {
			t.Errorf("%T: a cookie that is not there", v)
		}
		if v.Body() != nil {
			t.Errorf("%T: a body", v)
		}
	}
}

func checkAgree(t *testing.T, raw []byte, want, got reqview.View, fields []httphead.Field) {
	t.Helper()
	if want.Method() != got.Method() || want.Path() != got.Path() || want.RawQuery() != got.RawQuery() {
		t.Fatalf("%q: %s %s ? %s, the field list's %s %s ? %s", raw,
			want.Method(), want.Path(), want.RawQuery(), got.Method(), got.Path(), got.RawQuery())
	}
	names := []string{"Authorization", "Cookie", "X-Session-Id", "Host", "Content-Length"}
	cookies := []string{"sid", "", "a"}
	for _, f := range fields {
		names = append(names, f.Name)
		if f.Name == "Cookie" {
			for part := range strings.SplitSeq(f.Value, ";") {
				name, _, _ := strings.Cut(part, "=")
				cookies = append(cookies, strings.TrimSpace(name))
			}
		}
	}
	for _, name := range names {
		if w, g := want.Header(name), got.Header(name); w != g {
			t.Fatalf("%q: %s %q, the field list's %q", raw, name, w, g)
		}
	}
	for _, name := range cookies {
		wv, wok := want.Cookie(name)
		gv, gok := got.Cookie(name)
		if wv != gv || wok != gok {
			t.Fatalf("%q: cookie %q %q %v, the field list's %q %v", raw, name, wv, wok, gv, gok)
		}
	}
}

// extractors are extractors with a source of every type a request's
// head holds, in an order picked by order, and the same sources with
// the header's name in another spelling.
func extractors(order uint8) []*session.Extractor {
	srcs := []config.Source{
		{Type: config.SourceHeader, Name: "X-Session-ID"},
		{Type: config.SourceQuery, Name: "session"},
		{Type: config.SourceCookie, Name: "sid"},
		{Type: config.SourceJWTClaim, Name: "sub"},
	}
	// Eight orders: each source first, the rest after it either way round.
	k := int(order) % len(srcs)
	srcs = append(srcs[k:], srcs[:k]...)
	if order&4 != 0 {
		slices.Reverse(srcs[1:])
	}
	lower := append([]config.Source(nil), srcs...)
	for i := range lower {
		if lower[i].Type == config.SourceHeader {
			lower[i].Name = "x-session-id"
		}
	}
	return []*session.Extractor{
		session.NewExtractor(srcs, tokenClaims{}),
		session.NewExtractor(lower, tokenClaims{}),
	}
}

// tokenClaims verifies tokens that start with "valid-", whose every
// claim is the token itself.
type tokenClaims struct{}

func (tokenClaims) Claim(token, _ string) (string, bool) {
	return token, strings.HasPrefix(token, "valid-")
}

// The net/http view is a struct of one pointer: a View without an
// allocation.
func TestOfRequestAllocatesNothing(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://r/p", nil)
	req.Header.Set("X-Session-Id", "s")
	var sink string
	if n := testing.AllocsPerRun(100, func() { sink = reqview.OfRequest(req).Header("X-Session-Id") }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	_ = sink
}
