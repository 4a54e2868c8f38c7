package webhook_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tetherproxy/tether/injector/inject"
	"github.com/tetherproxy/tether/injector/webhook"
)

func newHandler(t testing.TB) *webhook.Handler {
	t.Helper()
	inj, err := inject.New(inject.Options{Image: "example.com/tether-sidecar:test", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(inj, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

const pod = `{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"r-","labels":{"app":"r"},"annotations":{
"tether.dev/sources":"Header:X-Session-ID","tether.dev/backend-selector":"app=vllm","tether.dev/backend-port":"8000"}},
"spec":{"containers":[{"name":"r","image":"r"}]}}`

func reviewJSON(kind, op, object string) string {
	r := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "u1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: kind},
			Namespace: "llm", Operation: admissionv1.Operation(op), Object: runtime.RawExtension{Raw: []byte(object)},
		},
	}
	b, _ := json.Marshal(r)
	return string(b)
}

// serve calls the handler directly (no server): the HTTPS round trip is
// in the app package's tests.
func serve(h http.Handler, path, body string) (*httptest.ResponseRecorder, *admissionv1.AdmissionReview) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		return rec, nil
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		panic(err)
	}
	return rec, &out
}

func TestHandler(t *testing.T) {
	h := newHandler(t)
	for _, c := range []struct {
		name, path, body string
		code             int
		allowed, patched bool
		message          string
	}{
		{"inject", webhook.PathMutate, reviewJSON("Pod", "CREATE", pod), 200, true, true, ""},
		{"opt-in entry, not opted in", webhook.PathOptIn, reviewJSON("Pod", "CREATE", pod), 200, true, false, ""},
		{"update is ignored", webhook.PathMutate, reviewJSON("Pod", "UPDATE", pod), 200, true, false, ""},
		{"not a pod", webhook.PathMutate, reviewJSON("Deployment", "CREATE", pod), 200, true, false, ""},
		{"denied", webhook.PathMutate, reviewJSON("Pod", "CREATE", strings.Replace(pod, `"Header:X-Session-ID"`, `"Heder:X"`, 1)), 200, false, false,
			`tether.dev/sources: unknown source type "Heder" (want Header, Query, Cookie, JWTClaim, Token or Body)`},
		{"pod that is not JSON", webhook.PathMutate, reviewJSON("Pod", "CREATE", `"x"`), 200, false, false, "cannot decode the pod"},
		{"empty", webhook.PathMutate, "", 400, false, false, ""},
		{"not json", webhook.PathMutate, "{", 400, false, false, ""},
		{"wrong kind", webhook.PathMutate, `{"apiVersion":"admission.k8s.io/v1","kind":"Pod"}`, 400, false, false, ""},
		{"v1beta1", webhook.PathMutate, `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`, 400, false, false, ""},
		{"no request", webhook.PathMutate, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400, false, false, ""},
		{"no uid", webhook.PathMutate, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`, 400, false, false, ""},
		{"oversized", webhook.PathMutate, strings.Repeat(" ", webhook.MaxBodyBytes+1), 413, false, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec, out := serve(h, c.path, c.body)
			if rec.Code != c.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.code, rec.Body)
			}
			if out == nil {
				return
			}
			r := out.Response
			if r.UID != "u1" || r.Allowed != c.allowed || (r.Patch != nil) != c.patched {
				t.Fatalf("response %+v", r)
			}
			if c.message != "" && (r.Result == nil || !strings.Contains(r.Result.Message, c.message)) {
				t.Fatalf("message %+v, want %q", r.Result, c.message)
			}
		})
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, webhook.PathMutate, strings.NewReader(reviewJSON("Pod", "CREATE", pod)))
	req.Header.Set("Content-Type", "text/plain")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain: %d", rec.Code)
	}
}

// FuzzDecodeReview: no body panics the decoder or the handler, and the
// handler answers only 200, 400 or 413.
func FuzzDecodeReview(f *testing.F) {
	f.Add([]byte(reviewJSON("Pod", "CREATE", pod)))
	f.Add([]byte(reviewJSON("Pod", "CREATE", `{"metadata":{"annotations":{"tether.dev/ttl":"1"}}}`)))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"kind":"Pod"},"operation":"CREATE","object":null}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"request":{"object":{"spec":{"containers":[{"ports":[{"containerPort":15020}]}]}}}}`))
	h := newHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, _ = webhook.DecodeReview(bytes.NewReader(body), webhook.MaxBodyBytes)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, webhook.PathMutate, bytes.NewReader(body))
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case 200, 400, 413:
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
	})
}
