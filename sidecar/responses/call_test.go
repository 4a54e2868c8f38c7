package responses

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tetherproxy/tether/sidecar/reqbody"
)

func TestParse(t *testing.T) {
	fields, _ := reqbody.NewFields(BodyFields...)
	for _, tc := range []struct {
		method, path, body string
		want               Call
	}{
		{"POST", "/v1/responses", `{"input":"hi"}`, Call{Kind: Create, Stores: true}},
		{"POST", "/v1/responses", `{"previous_response_id":"resp_1","store":true}`, Call{Kind: Create, ID: "resp_1", Stores: true}},
		{"POST", "/v1/responses", `{"previous_response_id":"resp_1","store":false}`, Call{Kind: Create, ID: "resp_1"}},
		{"POST", "/v1/responses", `{"previous_response_id":null}`, Call{Kind: Create, Stores: true}},
		{"POST", "/v1/responses", `{"previous_response_id":"a/b"}`, Call{Kind: Create, Stores: true}},
		{"POST", "/v1/responses", `{"previous_response_id":"` + strings.Repeat("r", MaxIDBytes+1) + `"}`, Call{Kind: Create, Stores: true}},
		{"POST", "/v1/responses", `not json`, Call{Kind: Create, Stores: true}},
		{"GET", "/v1/responses", ``, Call{}},
		{"GET", "/v1/responses/resp_2", ``, Call{Kind: ByID, ID: "resp_2"}},
		{"DELETE", "/v1/responses/resp_2", ``, Call{Kind: ByID, ID: "resp_2"}},
		{"POST", "/v1/responses/resp_2/cancel", ``, Call{Kind: ByID, ID: "resp_2"}},
		{"GET", "/v1/responses/resp_2/input_items", ``, Call{Kind: ByID, ID: "resp_2"}},
		{"POST", "/v1/responses/resp_2", ``, Call{}},
		{"GET", "/v1/responses/resp_2/cancel", ``, Call{}},
		{"GET", "/v1/responses/resp_2/other", ``, Call{}},
		{"GET", "/v1/responsesX/resp_2", ``, Call{}},
		{"POST", "/v1/chat/completions", `{"previous_response_id":"resp_1"}`, Call{}},
	} {
		r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
		r = r.WithContext(reqbody.NewContext(context.Background(), fields.Of([]byte(tc.body))))
		if got := Parse(r); got != tc.want {
			t.Errorf("%s %s %s: %+v, want %+v", tc.method, tc.path, tc.body, got, tc.want)
		}
	}
}

func TestLostError(t *testing.T) {
	for _, e := range []*LostError{{ID: "resp_1", Param: FieldPreviousResponseID}, {ID: "resp_2"}} {
		w := httptest.NewRecorder()
		e.Write(w)
		body := w.Body.String()
		if w.Code != http.StatusNotFound || w.Header().Get("Content-Type") != "application/json" ||
			!strings.Contains(body, `"type":"invalid_request_error"`) || !strings.Contains(body, e.ID) ||
			!strings.Contains(body, "no longer available") {
			t.Fatalf("%d %s", w.Code, body)
		}
		if e.Param != "" && !strings.Contains(body, `"code":"previous_response_not_found"`) {
			t.Fatalf("code: %s", body)
		}
	}
}
