package responses

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// LostError is the answer to a request whose stored response was on a
// backend that is no longer selectable: no other backend can know it, so
// tether answers 404 itself instead of sending the request anywhere.
type LostError struct {
	ID    string
	Param string // "previous_response_id", or "" for an id in the path
}

func (e *LostError) Error() string {
	return fmt.Sprintf("response %s was stored on a model server that is no longer available", e.ID)
}

// Message is the error message clients see.
func (e *LostError) Message() string {
	what := "Response"
	if e.Param != "" {
		what = "Previous response"
	}
	return fmt.Sprintf("%s with id '%s' not found: it was stored on a model server that is no longer available "+
		"(model servers keep stored responses in memory); start again without it", what, e.ID)
}

// Write answers 404 in the OpenAI error shape, with OpenAI's code for an
// unknown previous_response_id, so clients that handle that error
// (start the conversation again with its full input) handle this one.
func (e *LostError) Write(w http.ResponseWriter) {
	code, param := "response_not_found", any(nil)
	if e.Param != "" {
		code, param = "previous_response_not_found", e.Param
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": e.Message(), "type": "invalid_request_error", "param": param, "code": code,
	}})
}
