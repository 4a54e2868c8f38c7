package reqbody

import (
	"context"
	"strings"
	"testing"

	"github.com/tetherproxy/tether/sidecar/jsonscan"
)

func TestBody(t *testing.T) {
	f, err := NewFields("model", "user", "metadata.session_id", "user")
	if err != nil {
		t.Fatal(err)
	}
	b := f.Of([]byte(`{"model":"m","user":42,"metadata":{"session_id":"s"}}`))
	if v, ok := b.String("model"); !ok || v != "m" {
		t.Errorf("model = %q, %v", v, ok)
	}
	if _, ok := b.String("user"); ok || b.Value("user").Kind != jsonscan.Number {
		t.Errorf("a number is no string: %+v", b.Value("user"))
	}
	if v, _ := b.String("metadata.session_id"); v != "s" || !b.IsObject() {
		t.Errorf("metadata.session_id = %q", v)
	}
	if v := b.Value("unknown"); v.Kind != jsonscan.Absent {
		t.Errorf("a path the body does not hold: %+v", v)
	}
	// A path the listener was not built with (a ModelServer's Body
	// source) is read by a scan of its own, by the same rules.
	other := f.Of([]byte(`{"model":"m","session":{"id":"abc","n":1}}`))
	if v, ok := other.String("session.id"); !ok || v != "abc" {
		t.Errorf("session.id, not among the fields = %q, %v", v, ok)
	}
	if v, ok := other.String("session.id"); !ok || v != "abc" {
		t.Errorf("session.id again = %q, %v", v, ok)
	}
	if v := other.Value("session..id"); v.Kind != jsonscan.Absent {
		t.Errorf("an invalid path: %+v", v)
	}
	if v, ok := (*Fields)(nil).Of([]byte(`{"k":"v"}`)).String("k"); !ok || v != "v" {
		t.Errorf("a listener without fields = %q, %v", v, ok)
	}
	if v, ok := f.Of([]byte(`{"session":{"id":"abc"}`)).String("session.id"); ok {
		t.Errorf("an incomplete document yielded %q", v)
	}
	long := f.Of([]byte(`{"user":"` + strings.Repeat("x", MaxValueBytes+1) + `"}`))
	if _, ok := long.String("user"); ok {
		t.Error("a string over MaxValueBytes was read")
	}
	if v, ok := f.Of([]byte(`{"user":"u"`)).String("user"); ok {
		t.Errorf("an incomplete document yielded %q", v)
	}
	if _, err := NewFields("a..b"); err == nil {
		t.Error("a malformed path was accepted")
	}
}

func TestContext(t *testing.T) {
	var none *Body = FromContext(context.Background())
	if _, ok := none.String("model"); ok || none.IsObject() {
		t.Error("no body yields something")
	}
	var nf *Fields
	b := nf.Of([]byte(`{"model":"m"}`))
	if b.IsObject() {
		t.Error("a listener reading no field scanned the body")
	}
	if v, ok := b.String("model"); !ok || v != "m" {
		t.Errorf("a field asked for on a listener reading none = %q, %v", v, ok)
	}
	f, _ := NewFields("model")
	ctx := NewContext(context.Background(), f.Of([]byte(`{"model":"m"}`)))
	if v, _ := FromContext(ctx).String("model"); v != "m" {
		t.Errorf("model = %q", v)
	}
}
