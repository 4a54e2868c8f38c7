package redisstore

import (
	"strconv"
	"testing"
	"time"
)

// Whatever a Redis hash holds (another tool or a person may have written
// it), reading it never panics, and what this store writes reads back
// exactly.
func FuzzParseBinding(f *testing.F) {
	f.Add("pod-a", "prefill-b", "1767225600123456789", "3", int64(1500))
	f.Add("", "", "", "", int64(-2))
	f.Add("p", "", "-5", "18446744073709551616", int64(-1))
	f.Add("p\x00", "{x}", "1e9", " 1", int64(0))
	f.Fuzz(func(t *testing.T, pod, prefill, created, gen string, pttl int64) {
		b, ok, err := parseFields([]any{pod, prefill, created, gen})
		if err != nil || ok != (pod != "") {
			t.Fatalf("parseFields: ok=%v err=%v", ok, err)
		}
		if ok && (b.Pod != pod || b.PrefillPod != prefill) {
			t.Fatalf("pod %q/%q read as %q/%q", pod, prefill, b.Pod, b.PrefillPod)
		}
		parseCreate([]any{int64(0), pod, prefill, created, gen, pttl})
		parseCreate([]any{pod, int64(1)})
		parseCreate(pod)
		_ = expiry(time.Unix(0, 0), pttl)

		// Round trip of what Create writes.
		n, err1 := strconv.ParseInt(created, 10, 64)
		g, err2 := strconv.ParseUint(gen, 10, 64)
		if pod == "" || err1 != nil || err2 != nil || n <= 0 {
			return
		}
		want := toBinding(pod, prefill, strconv.FormatInt(n, 10), strconv.FormatUint(g, 10))
		if want.Created.UnixNano() != n || want.Gen != g {
			t.Fatalf("created %d gen %d read back as %d %d", n, g, want.Created.UnixNano(), want.Gen)
		}
	})
}
