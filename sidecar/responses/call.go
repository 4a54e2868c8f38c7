// Package responses is what tether knows of the OpenAI Responses API: a
// model server (vLLM with VLLM_ENABLE_RESPONSES_API_STORE=1) keeps the
// responses it stored in its own memory, so a request that names one —
// POST /v1/responses with previous_response_id, or /v1/responses/{id}
// and its cancel and input_items — can only succeed on the backend that
// produced it. This package reads which response a request names (Parse),
// learns the id of a new response from the answer as it streams by
// (Watch), and answers, in the OpenAI error shape, a request whose
// response was on a backend that is gone (LostError). The resolver keeps
// the id → backend bindings in the pool's store.
package responses

import (
	"net/http"
	"strings"

	"github.com/tetherproxy/tether/sidecar/jsonscan"
	"github.com/tetherproxy/tether/sidecar/reqview"
)

// Body fields of POST /v1/responses that routing reads; a listener's
// reqbody.Fields must include them.
const (
	FieldPreviousResponseID = "previous_response_id"
	FieldStore              = "store"
)

// BodyFields are the request-body paths this package reads.
var BodyFields = []string{FieldPreviousResponseID, FieldStore}

// MaxIDBytes bounds a response id: longer ones are no id (vLLM's are
// "resp_" and 32 hex digits, OpenAI's about 60 characters).
const MaxIDBytes = 256

const prefix = "/v1/responses"

// Kind is what a request does with the Responses API.
type Kind uint8

// Kinds.
const (
	None   Kind = iota // not a Responses API request
	Create             // POST /v1/responses
	ByID               // GET or DELETE /v1/responses/{id}, POST .../cancel, GET .../input_items
)

// Call is a request's use of the Responses API.
type Call struct {
	Kind Kind
	// ID is the stored response the request needs: the body's
	// previous_response_id (Create) or the path's id (ByID); "" when it
	// needs none (a Create that starts a chain).
	ID string
	// Stores reports whether the answer's response is stored (a Create
	// whose store is not false), so its id is worth binding.
	Stores bool
}

// Param is the request parameter that named ID, for error answers.
func (c Call) Param() string {
	if c.Kind == Create {
		return FieldPreviousResponseID
	}
	return ""
}

// Parse reads r's Responses API call. The body fields come from the
// reqbody.Body in r's context (nil: none).
func Parse(r *http.Request) Call { return ParseFrom(reqview.OfRequest(r)) }

// ParseFrom is Parse reading the request through v.
func ParseFrom(r reqview.View) Call {
	p := r.Path()
	if !strings.HasPrefix(p, prefix) {
		return Call{}
	}
	rest := p[len(prefix):]
	if rest == "" || rest == "/" {
		if r.Method() != http.MethodPost {
			return Call{}
		}
		body := r.Body()
		c := Call{Kind: Create, Stores: body.Value(FieldStore).Kind != jsonscan.False}
		if id, ok := body.String(FieldPreviousResponseID); ok && validID(id) {
			c.ID = id
		}
		return c
	}
	if rest[0] != '/' {
		return Call{} // /v1/responsesX
	}
	id, action, _ := strings.Cut(rest[1:], "/")
	if !validID(id) {
		return Call{}
	}
	switch {
	case action == "" && (r.Method() == http.MethodGet || r.Method() == http.MethodDelete),
		action == "cancel" && r.Method() == http.MethodPost,
		action == "input_items" && r.Method() == http.MethodGet:
		return Call{Kind: ByID, ID: id}
	}
	return Call{}
}

// validID accepts what a model server can have minted: printable ASCII
// without '/', within MaxIDBytes.
func validID(id string) bool {
	if id == "" || len(id) > MaxIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f || c == '/' {
			return false
		}
	}
	return true
}
