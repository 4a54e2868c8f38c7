// Package webhook serves the injector over HTTP: it decodes an
// AdmissionReview, hands the pod to inject, and writes the response. It
// holds no policy; that is inject's.
package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	admissionv1 "k8s.io/api/admission/v1"
)

// MaxBodyBytes bounds an AdmissionReview. The API server caps objects at
// about 1.5 MiB in etcd, but a pod is far smaller; anything larger is not
// a pod worth reading.
const MaxBodyBytes = 1 << 20

// ErrTooLarge is returned by DecodeReview for a body over the limit.
var ErrTooLarge = errors.New("admission review body is too large")

// DecodeReview reads one AdmissionReview v1 of at most limit bytes and
// checks what the injector relies on: the kind and version, a request
// with a UID. It never panics, whatever the input.
func DecodeReview(r io.Reader, limit int64) (*admissionv1.AdmissionReview, error) {
	body, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	if int64(len(body)) > limit {
		return nil, ErrTooLarge
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("empty body")
	}
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rev); err != nil {
		return nil, fmt.Errorf("decode AdmissionReview: %w", err)
	}
	switch {
	case rev.APIVersion != admissionv1.SchemeGroupVersion.String():
		return nil, fmt.Errorf("apiVersion %q is not %s", rev.APIVersion, admissionv1.SchemeGroupVersion)
	case rev.Kind != "AdmissionReview":
		return nil, fmt.Errorf("kind %q is not AdmissionReview", rev.Kind)
	case rev.Request == nil:
		return nil, errors.New("AdmissionReview has no request")
	case rev.Request.UID == "":
		return nil, errors.New("AdmissionReview request has no uid")
	}
	return &rev, nil
}
