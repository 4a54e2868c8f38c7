package proxy

import (
	"net"
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/tetherproxy/tether/sidecar/httphead"
)

// The lean path's request headers (docs/hop-cost.md "A lean data path").
// A client's request read Listed (downstream.Server.ListRequests) comes
// with an empty Header and its fields as a list, in the order they came.
// The exchange reads them there (clientField), routes by them through a
// reqview.Head, edits the list in place with the rules outbound applies
// to a map, rule for rule (outboundFields), and the transport writes the
// list as it stands (upstream.FieldLister): the backend receives the
// fields the map path sends it, in the client's order with the proxy's
// own after them, where the map path sorts them by name
// (TestListedRequestsAsMapped holds the two paths to the same fields).

// fieldLister is the client's writer when its server lists requests
// (downstream's response).
type fieldLister interface {
	RequestFields(*http.Request) ([]httphead.Field, bool)
}

// clientField is the first value of the client's field name (canonical).
func (x *exchange) clientField(name string) string {
	if !x.fieldsIn {
		return x.in.Header.Get(name)
	}
	return httphead.FieldValue(x.inFields, name)
}

// unlist gives the client's request its fields as a Header, for the map
// path: a pool whose transport writes no list (not package upstream's).
func (x *exchange) unlist(r *http.Request) {
	h := httphead.HeaderOf(x.inFields)
	x.in.Header, r.Header = h, h
	x.inFields, x.fieldsIn = nil, false
}

// setRequestID replaces the client's request ids with id, as
// Header.Set would.
func (x *exchange) setRequestID(id string) {
	if !x.fieldsIn {
		x.idValues[0] = id
		x.in.Header[RequestIDHeader] = x.idValues[:] // Header.Set, without its allocation
		return
	}
	x.inFields = dropNamed(x.inFields, RequestIDHeader)
	x.inFields = append(x.inFields, httphead.Field{Name: RequestIDHeader, Value: id})
}

// dropNamed removes the fields named name, in place.
func dropNamed(fields []httphead.Field, name string) []httphead.Field {
	out := fields[:0]
	for _, f := range fields {
		if f.Name != name {
			out = append(out, f)
		}
	}
	clear(fields[len(out):])
	return out
}

// outboundFields is outbound's header rules on the client's listed
// fields, in place: what remains of them in their order, then the
// fields the proxy sets (Te, Connection and Upgrade for an upgrade,
// X-Forwarded-For, -Host and -Proto), each subject to the same
// removals as on a map (a routing name strips even the proxy's own).
// The User-Agent is the first one's value, if not empty (what
// Request.Write sends of a map's), and no other; the prefill header is
// the attempt's (target).
func (x *exchange) outboundFields(in *http.Request) ([]httphead.Field, error) {
	fields := x.inFields
	// What the rules read, in one pass: the Connection values (an
	// upgrade, and the fields they name, as Header.Del would find them),
	// the Te values and the X-Forwarded-For values.
	var connBuf, teBuf, xffBuf [2]string
	conn, te, xffs := connBuf[:0], teBuf[:0], xffBuf[:0]
	var named [8]string
	connNames := named[:0]
	for _, f := range fields {
		switch f.Name {
		case "Connection":
			conn = append(conn, f.Value)
			for name := range connectionNames(f.Value) {
				connNames = append(connNames, textproto.CanonicalMIMEHeaderKey(name))
			}
		case "Te":
			te = append(te, f.Value)
		case "X-Forwarded-For":
			xffs = append(xffs, f.Value)
		}
	}
	upType := ""
	if httpguts.HeaderValuesContainsToken(conn, "Upgrade") {
		upType = x.clientField("Upgrade")
	}
	if !printable(upType) {
		return nil, badUpgrade(upType)
	}
	trailers := httpguts.HeaderValuesContainsToken(te, "trailers")
	hasXFF, xff := len(xffs) > 0, strings.Join(xffs, ", ")
	prefill := x.pool.prefillName
	// The client's X-Forwarded-Host and -Proto stay whatever names them
	// (the map path takes them before it removes anything): they move
	// to the end, among the proxy's own.
	var kept [4]httphead.Field
	forwarded := kept[:0]
	out := fields[:0]
	ua := false
	for _, f := range fields {
		switch {
		case f.Name == "X-Forwarded-Host" || f.Name == "X-Forwarded-Proto":
			forwarded = append(forwarded, f)
			continue
		case f.Name == "X-Forwarded-For" || f.Name == "Forwarded" || f.Name == prefill ||
			hopByHop(f.Name) || contains(connNames, f.Name):
			continue
		case f.Name == "User-Agent":
			if ua {
				continue
			}
			ua = true
			if f.Value == "" {
				continue
			}
		}
		out = append(out, f)
	}
	clear(fields[len(out):])
	add := func(name, value string) {
		out = append(out, httphead.Field{Name: name, Value: value})
	}
	if trailers {
		add("Te", "trailers")
	}
	if upType != "" {
		add("Connection", "Upgrade")
		add("Upgrade", upType)
	}
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		if hasXFF {
			ip = xff + ", " + ip
		}
		add("X-Forwarded-For", ip)
	}
	host, proto := true, true
	for _, f := range forwarded {
		host = host && f.Name != "X-Forwarded-Host"
		proto = proto && f.Name != "X-Forwarded-Proto"
	}
	out = append(out, forwarded...)
	if host {
		add("X-Forwarded-Host", in.Host)
	}
	if proto {
		add("X-Forwarded-Proto", protoOf(in))
	}
	out = x.h.stripRoutingFields(out)
	return out, nil
}

// protoOf is the X-Forwarded-Proto of a request that came without one.
func protoOf(in *http.Request) string {
	if in.TLS != nil {
		return "https"
	}
	return "http"
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// stripRoutingFields is stripRouting on a list, in place.
func (h *Handler) stripRoutingFields(fields []httphead.Field) []httphead.Field {
	out := fields[:0]
	for _, f := range fields {
		if !h.routing(f.Name) {
			out = append(out, f)
		}
	}
	clear(fields[len(out):])
	return out
}

// routing reports whether name is a routing header's, in any spelling.
func (h *Handler) routing(name string) bool {
	for _, s := range h.strip {
		if sameHeaderName(name, s) {
			return true
		}
	}
	return false
}

// targetFields is target's prefill header on the listed fields: the
// attempt's fields are outbound's and, when the decision names a prefill
// backend, the prefill header after them.
func (x *exchange) targetFields() {
	x.sendFields = x.outFields
	if name := x.pool.prefillName; name != "" && x.d.Prefill.Addr != "" {
		// Into the room after outbound's fields (each attempt's in the
		// same place): outFields keeps its length.
		x.sendFields = append(x.outFields, httphead.Field{Name: name, Value: x.d.Prefill.Addr})
	}
}

// OutboundFields lends the transport the attempt's fields
// (upstream.FieldLister) when the client's request was listed.
func (x *exchange) OutboundFields() ([]httphead.Field, bool) { return x.sendFields, x.fieldsIn }
