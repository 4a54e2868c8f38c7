package upstream

import (
	"context"
	"net/http/httptrace"
	"net/textproto"

	"github.com/tetherproxy/tether/sidecar/httphead"
)

// Observer is told what a round trip met, as httptrace.ClientTrace's
// GotConn and Got1xxResponse are, by a context that answers ObserverKey
// with it. A caller's per-request state that implements it costs no
// closure and no context value per request, where a ClientTrace costs
// both (README "The hop's cost"). A context that carries both is told
// through the Observer only; the trace's other hooks still apply.
type Observer interface {
	GotConn(httptrace.GotConnInfo)
	Got1xxResponse(code int, header textproto.MIMEHeader) error
}

// ObserverKey is the context key an Observer is found under.
type ObserverKey struct{}

// HeadLender is an Observer that lends the round trip where to parse the
// response's head (httphead.Responses: the response, its header map and
// value slab), so that its caller's round trips, one after another,
// reuse them (four allocations per response spared). The caller must
// not lend the same to another round trip while it uses the response
// one returned; without a lender each response is parsed into new ones.
type HeadLender interface {
	ResponseHeads() *httphead.Responses
}

// FieldLister is an Observer whose request's header fields are a list,
// written as they stand, in their order, in place of the request's
// Header (the proxy's lean path, docs/hop-cost.md "A lean data path"):
// canonical names, values with no line break and no space or tab at
// either end, at most one User-Agent; Host, Content-Length,
// Transfer-Encoding and Trailer fields are left out (the request's own
// fields say those). ok false: the Header is written, as ever.
type FieldLister interface {
	OutboundFields() (fields []httphead.Field, ok bool)
}

// hooks are the round trip's: the context's Observer, else its trace's.
type hooks struct {
	obs   Observer
	trace *httptrace.ClientTrace // for WroteRequest, and the rest without obs
	heads *httphead.Responses    // the Observer's, if it lends them
	// fields are the Observer's request fields, when listed is set
	// (FieldLister).
	fields []httphead.Field
	listed bool
}

func hooksOf(ctx context.Context) hooks {
	obs, _ := ctx.Value(ObserverKey{}).(Observer)
	h := hooks{obs: obs, trace: httptrace.ContextClientTrace(ctx)}
	if l, ok := obs.(HeadLender); ok {
		h.heads = l.ResponseHeads()
	}
	if l, ok := obs.(FieldLister); ok {
		h.fields, h.listed = l.OutboundFields()
	}
	return h
}

func (h hooks) gotConn(info httptrace.GotConnInfo) {
	switch {
	case h.obs != nil:
		h.obs.GotConn(info)
	case h.trace != nil && h.trace.GotConn != nil:
		h.trace.GotConn(info)
	}
}

func (h hooks) got1xx(code int, header textproto.MIMEHeader) error {
	switch {
	case h.obs != nil:
		return h.obs.Got1xxResponse(code, header)
	case h.trace != nil && h.trace.Got1xxResponse != nil:
		return h.trace.Got1xxResponse(code, header)
	}
	return nil
}
