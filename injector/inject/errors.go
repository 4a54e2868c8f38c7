package inject

import (
	"errors"
	"fmt"
	"strings"
)

// AnnotationError is one reason to deny a pod: the annotation at fault and
// the rule it breaks. Its text is what kubectl shows the user.
type AnnotationError struct {
	Annotation string
	Rule       string
}

func (e *AnnotationError) Error() string { return e.Annotation + ": " + e.Rule }

func annErr(key, format string, a ...any) *AnnotationError {
	return &AnnotationError{Annotation: key, Rule: fmt.Sprintf(format, a...)}
}

// Denial is the set of problems that deny a pod, in a stable order.
type Denial struct {
	Errors []*AnnotationError
}

// Error joins the problems with "; " so the API server prints them on one line.
func (d *Denial) Error() string {
	parts := make([]string, len(d.Errors))
	for i, e := range d.Errors {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// problems collects AnnotationErrors while parsing and building.
type problems []*AnnotationError

func (p *problems) add(key, format string, a ...any) {
	*p = append(*p, annErr(key, format, a...))
}

// err returns nil or a *Denial with duplicates removed (two rules can
// trip over one bad value and say the same thing).
func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	seen := map[string]bool{}
	d := &Denial{}
	for _, e := range p {
		if s := e.Error(); !seen[s] {
			seen[s] = true
			d.Errors = append(d.Errors, e)
		}
	}
	return d
}

// AsDenial reports whether err denies the pod (as opposed to an internal error).
func AsDenial(err error) (*Denial, bool) {
	var d *Denial
	ok := errors.As(err, &d)
	return d, ok
}
