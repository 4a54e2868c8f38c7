package loadscrape

import (
	"strings"
	"testing"
)

// FuzzParse: any page a backend (or whoever answers on its address)
// returns is parsed without panicking.
func FuzzParse(f *testing.F) {
	for _, s := range []string{vllm, vllmOld, sglang, "", "x 1\n", "vllm:num_requests_waiting NaN\n", "# TYPE a histogram\na_bucket{le=\"+Inf\"} 1\n"} {
		f.Add(s)
	}
	cfg := defaults()
	f.Fuzz(func(t *testing.T, page string) {
		Parse(strings.NewReader(page), cfg)
	})
}
