package webhook

import (
	"encoding/json"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetherproxy/tether/injector/inject"
)

// Paths of the two webhook entries. The API server's selectors decide
// which pods reach which path: PathMutate gets every pod of a labelled
// namespace, PathOptIn only pods labelled tether.dev/inject=true elsewhere.
const (
	PathMutate = "/mutate"
	PathOptIn  = "/mutate/opt-in"
)

// Results besides inject's skip reasons, as metric labels.
const (
	ResultInjected  = "injected"
	ResultDenied    = "denied"
	ResultError     = "error" // malformed request or internal failure
	ResultNotPod    = "not_pod"
	ResultNotCreate = "not_create"
)

// Handler serves AdmissionReview v1 for pods.
type Handler struct {
	inj        *inject.Injector
	log        *slog.Logger
	admissions *prometheus.CounterVec
	duration   prometheus.Histogram
}

// New returns a Handler whose metrics are registered on reg.
func New(inj *inject.Injector, log *slog.Logger, reg prometheus.Registerer) (*Handler, error) {
	h := &Handler{
		inj: inj,
		log: log,
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_injector_admissions_total",
			Help: "Admission requests by result: injected, denied, error, or the reason a pod was skipped.",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tether_injector_duration_seconds",
			Help:    "Time to answer an admission request, from the first byte read to the response written.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
	}
	for _, c := range []prometheus.Collector{h.admissions, h.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Zero series for every result, so dashboards and alerts see them
	// before the first admission of each kind.
	for _, r := range []string{ResultInjected, ResultDenied, ResultError, ResultNotPod, ResultNotCreate} {
		h.admissions.WithLabelValues(r)
	}
	for _, r := range inject.SkipReasons {
		h.admissions.WithLabelValues(string(r))
	}
	return h, nil
}

// ServeHTTP answers one AdmissionReview. Malformed bodies get 400,
// oversized ones 413; anything else gets a 200 with the verdict inside.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() { h.duration.Observe(time.Since(start).Seconds()) }()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.fail(w, http.StatusMethodNotAllowed, "POST an AdmissionReview")
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			h.fail(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
			return
		}
	}
	rev, err := DecodeReview(r.Body, MaxBodyBytes)
	switch {
	case errors.Is(err, ErrTooLarge):
		h.fail(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	case err != nil:
		h.fail(w, http.StatusBadRequest, err.Error())
		return
	}
	resp, result := h.review(rev.Request, r.URL.Path != PathOptIn)
	h.admissions.WithLabelValues(result).Inc()
	resp.UID = rev.Request.UID
	out := admissionv1.AdmissionReview{TypeMeta: rev.TypeMeta, Response: resp}
	b, err := json.Marshal(out)
	if err != nil {
		h.fail(w, http.StatusInternalServerError, "encode response")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// review decides one request and returns the response and its result label.
func (h *Handler) review(req *admissionv1.AdmissionRequest, namespaceSelected bool) (*admissionv1.AdmissionResponse, string) {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.SubResource != "" {
		return allow, ResultNotPod
	}
	if req.Operation != admissionv1.Create {
		return allow, ResultNotCreate
	}
	log := h.log.With("uid", req.UID, "namespace", req.Namespace, "pod", podName(req))
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		log.Warn("cannot decode pod", "err", err)
		return deny(http.StatusBadRequest, metav1.StatusReasonBadRequest, "tether injector: cannot decode the pod: "+err.Error()), ResultError
	}
	patch, res, err := h.inj.Patch(&pod, inject.Request{Namespace: req.Namespace, NamespaceSelected: namespaceSelected})
	if err != nil {
		if _, ok := inject.AsDenial(err); ok {
			log.Info("pod denied", "reason", err.Error())
			return deny(http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error()), ResultDenied
		}
		log.Error("injection failed", "err", err)
		return deny(http.StatusInternalServerError, metav1.StatusReasonInternalError, "tether injector: "+err.Error()), ResultError
	}
	allow.Warnings = res.Warnings
	if res.Pod == nil {
		log.Debug("pod skipped", "reason", res.Skip)
		return allow, string(res.Skip)
	}
	pt := admissionv1.PatchTypeJSONPatch
	allow.PatchType, allow.Patch = &pt, patch
	log.Info("sidecar injected", "dryRun", req.DryRun != nil && *req.DryRun)
	return allow, ResultInjected
}

func deny(code int32, reason metav1.StatusReason, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg,
	}}
}

// podName is for logs: at CREATE a pod often has only a generateName.
func podName(req *admissionv1.AdmissionRequest) string {
	if req.Name != "" {
		return req.Name
	}
	var m struct {
		Metadata struct {
			GenerateName string `json:"generateName"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(req.Object.Raw, &m)
	return m.Metadata.GenerateName
}

func (h *Handler) fail(w http.ResponseWriter, code int, msg string) {
	h.admissions.WithLabelValues(ResultError).Inc()
	h.log.Warn("bad admission request", "status", code, "err", msg)
	http.Error(w, msg, code)
}
