// Package reqview is what routing reads of a client's request: its
// method, path and query, a header field's first value, a cookie, and the
// body the proxy buffered. The session extractor, the Responses API's
// call and the resolver read requests through a View and nothing else.
//
// Why: a data path that keeps no header map for the common request (the
// plan in docs/hop-cost.md, "A lean data path") must route exactly as
// one that does. Two views implement it: OfRequest over net/http's
// request, and Head over the fields httphead parses, in the order they
// came (httphead.Requests.Fields). FuzzViewsAgree holds them equal on
// every head httphead takes.
package reqview

import (
	"net/http"
	"net/url"

	"github.com/tetherproxy/tether/sidecar/httphead"
	"github.com/tetherproxy/tether/sidecar/reqbody"
)

// View is a request as routing reads it.
type View interface {
	Method() string
	// Path is the request target's path, unescaped (url.URL's Path).
	Path() string
	// RawQuery is the target's query, without its '?'.
	RawQuery() string
	// Header is the first value of the field named name, which must be
	// in canonical form (textproto.CanonicalMIMEHeaderKey); "" for none.
	Header(name string) string
	// Cookie is the value of the first cookie named name (the name
	// matched exactly), as net/http's Request.CookiesNamed reads it.
	Cookie(name string) (string, bool)
	// Body is the body the proxy buffered, or nil (whose reads yield
	// nothing).
	Body() *reqbody.Body
}

// OfRequest is r as a View: its Header, URL and cookies, and the body
// its context carries (reqbody.FromContext). A struct of one pointer,
// it converts to a View without an allocation.
func OfRequest(r *http.Request) View { return netRequest{r} }

type netRequest struct{ r *http.Request }

func (v netRequest) Method() string { return v.r.Method }

func (v netRequest) Path() string {
	if v.r.URL == nil {
		return ""
	}
	return v.r.URL.Path
}

func (v netRequest) RawQuery() string {
	if v.r.URL == nil {
		return ""
	}
	return v.r.URL.RawQuery
}

func (v netRequest) Header(name string) string {
	if vs := v.r.Header[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func (v netRequest) Cookie(name string) (string, bool) {
	// CookiesNamed allocates only the matching cookies.
	if cs := v.r.CookiesNamed(name); len(cs) > 0 {
		return cs[0].Value, true
	}
	return "", false
}

func (v netRequest) Body() *reqbody.Body { return reqbody.FromContext(v.r.Context()) }

// Head is a request as httphead parsed it, without a header map: its
// method, its target's URL, its fields in the order they came, and its
// buffered body. A caller keeps one per connection and passes a pointer.
type Head struct {
	method string
	url    *url.URL
	fields []httphead.Field
	body   *reqbody.Body
}

// Reset makes h the request of method and u (httphead's URL for its
// target) with fields (canonical names, trimmed values, as
// httphead.Requests.Fields lists them) and body (nil: none). h keeps
// them: they must stay as they are while it is read.
func (h *Head) Reset(method string, u *url.URL, fields []httphead.Field, body *reqbody.Body) {
	*h = Head{method: method, url: u, fields: fields, body: body}
}

func (h *Head) Method() string { return h.method }

func (h *Head) Path() string {
	if h.url == nil {
		return ""
	}
	return h.url.Path
}

func (h *Head) RawQuery() string {
	if h.url == nil {
		return ""
	}
	return h.url.RawQuery
}

func (h *Head) Header(name string) string { return httphead.FieldValue(h.fields, name) }

// Cookie reads the Cookie fields as net/http does, by net/http itself:
// a request of those fields alone, built only when a cookie is asked
// for (a pool with a Cookie source).
func (h *Head) Cookie(name string) (string, bool) {
	var values []string
	for _, f := range h.fields {
		if f.Name == "Cookie" {
			values = append(values, f.Value)
		}
	}
	if values == nil {
		return "", false
	}
	return netRequest{&http.Request{Header: http.Header{"Cookie": values}}}.Cookie(name)
}

func (h *Head) Body() *reqbody.Body { return h.body }
