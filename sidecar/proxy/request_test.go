package proxy

import (
	"regexp"
	"strings"
	"testing"
)

func TestValidRequestID(t *testing.T) {
	for id, want := range map[string]bool{
		"":                              false,
		"abc":                           true,
		"7f3c-11ee-b962-0242ac120002":   true,
		strings.Repeat("x", 128):        true,
		strings.Repeat("x", 129):        false,
		"has space":                     false,
		"tab\there":                     false,
		"nl\n":                          false,
		"é":                             false,
		"{\"json\":\"quotes\"}<script>": true, // printable: logged as a JSON string
	} {
		if got := validRequestID(id); got != want {
			t.Errorf("validRequestID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestNewRequestID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := NewRequestID(new([36]byte)) // each its own array, as each exchange's
		if !re.MatchString(id) || seen[id] {
			t.Fatalf("id %q is no fresh UUIDv4", id)
		}
		seen[id] = true
	}
}

func TestValidTraceparent(t *testing.T) {
	const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for tp, want := range map[string]bool{
		ok: true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future": true,
		ok + "-extra": false, // version 00 has exactly four fields
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": false,
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01": false,
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01": false,
		ok[:54]: false,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + strings.Repeat("-x", 200): false,
	} {
		if got := validTraceparent(tp); got != want {
			t.Errorf("validTraceparent(%q) = %v, want %v", tp, got, want)
		}
	}
}

// FuzzRequestMeta: what the proxy reads from untrusted requests for
// itself (id, trace context) never panics, and an id
// it keeps or a traceparent it logs is within its bounds.
func FuzzRequestMeta(f *testing.F) {
	f.Add("router-1", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("", "01-"+strings.Repeat("a", 52))
	f.Fuzz(func(t *testing.T, id, tp string) {
		if validRequestID(id) && (len(id) > maxRequestIDLen || strings.ContainsAny(id, " \t\r\n")) {
			t.Fatalf("accepted id %q", id)
		}
		if validTraceparent(tp) && (len(tp) > maxTraceparentLen || len(tp) < 55) {
			t.Fatalf("accepted traceparent %q", tp)
		}
	})
}
