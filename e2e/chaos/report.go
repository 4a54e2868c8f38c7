package chaos

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Figures are one fault's measurements.
type Figures struct {
	Fault  string
	Sent   int // turns started while the fault was on and until recovery
	Failed int
	// Allowed is how many of the failures the target allows (a killed
	// backend's in-flight streams; a faulty backend's requests before its
	// ejection), and AllowedWhy says which.
	Allowed    int
	AllowedWhy string
	Moved      int // sessions whose backend changed
	Recover    time.Duration
	RecoverWhy string // what recovered means for this fault
	Notes      []string
	// Summary, when set, is a line under the README's fault table.
	Summary string
}

// Churn is a load run's measurements.
type Churn struct {
	Name       string
	Sessions   int
	Rate       float64
	MaxEntries int
	Replicas   int
	Failed     int
	FirstErr   string // the first failure's error
	// Replayed is how many requests the client's transport sent again
	// after a reused connection closed before any response byte.
	Replayed int
	Elapsed  time.Duration
	// Samples of the first replica's /metrics after a warm-up and after each part of the run.
	Samples []Sample
}

// Sample is one reading of a replica's process during a load run.
type Sample struct {
	Sessions   int
	Goroutines float64
	OpenFDs    float64
	HeapBytes  float64 // go_memstats_heap_inuse_bytes
	RSSBytes   float64
	Bindings   float64
	P50, P99   time.Duration // of this tenth's requests
}

// Report collects the figures of one run.
type Report struct {
	mu      sync.Mutex
	started time.Time
	faults  []Figures
	churns  []Churn
}

// NewReport starts a report.
func NewReport() *Report { return &Report{started: time.Now()} }

// Fault adds a fault's figures.
func (r *Report) Fault(f Figures) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, f)
	// In the order of the fault's name (its number), whatever order the
	// tests ran in.
	slices.SortStableFunc(r.faults, func(a, b Figures) int { return strings.Compare(a.Fault, b.Fault) })
}

// Churn adds a load run's figures.
func (r *Report) Churn(c Churn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.churns = append(r.churns, c)
}

// Empty reports whether nothing was measured.
func (r *Report) Empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.faults) == 0 && len(r.churns) == 0
}

// Markdown renders the report; command is how it was made.
func (r *Report) Markdown(command string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "# Reliability: what the chaos suite measured\n\n")
	fmt.Fprintf(&b, "Written by `%s` (%s, %s/%s, %d CPUs, %s of faults and load) from what it measured; nothing here is typed by hand.\n\n",
		command, time.Now().UTC().Format("2006-01-02"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), time.Since(r.started).Round(time.Second))
	if len(r.faults) > 0 {
		b.WriteString(r.faultTable())
		b.WriteString("\n")
		for _, f := range r.faults {
			fmt.Fprintf(&b, "### %s\n\n", f.Fault)
			fmt.Fprintf(&b, "- %d turns sent, %d failed", f.Sent, f.Failed)
			if f.AllowedWhy != "" {
				fmt.Fprintf(&b, " (%d allowed: %s)", f.Allowed, f.AllowedWhy)
			}
			fmt.Fprintf(&b, "; %d sessions moved to another backend.\n", f.Moved)
			fmt.Fprintf(&b, "- Recovered in %s: %s.\n", round(f.Recover), f.RecoverWhy)
			for _, n := range f.Notes {
				fmt.Fprintf(&b, "- %s\n", n)
			}
			b.WriteString("\n")
		}
	}
	for _, c := range r.churns {
		b.WriteString(c.markdown())
	}
	return b.String()
}

func (r *Report) faultTable() string {
	var b strings.Builder
	b.WriteString("| fault | turns sent | failed | of which allowed | sessions moved | time to recover |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, f := range r.faults {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s |\n", f.Fault, f.Sent, f.Failed, f.Allowed, f.Moved, round(f.Recover))
	}
	return b.String()
}

// Summary is the README's block: the fault table and each load run's
// one-line verdict.
func (r *Report) Summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	if len(r.faults) > 0 {
		b.WriteString(r.faultTable())
	}
	for _, f := range r.faults {
		if f.Summary != "" {
			fmt.Fprintf(&b, "\n%s: %s\n", f.Fault, f.Summary)
		}
	}
	for _, c := range r.churns {
		if len(c.Samples) < 2 {
			continue
		}
		first, last := c.Samples[0], c.Samples[len(c.Samples)-1]
		fmt.Fprintf(&b, "\n%s: %d sessions at %.0f/s, %d failed; goroutines %.0f → %.0f, open fds %.0f → %.0f, heap %s → %s, p99 %s → %s.\n",
			c.Name, c.Sessions, c.Rate, c.Failed, first.Goroutines, last.Goroutines, first.OpenFDs, last.OpenFDs,
			mib(first.HeapBytes), mib(last.HeapBytes), round(first.P99), round(last.P99))
	}
	return b.String()
}

func (c Churn) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", c.Name)
	fmt.Fprintf(&b, "%d distinct sessions, one turn each, at %.0f per second through %d replica(s) with maxEntries %d: %d failed, %s.\n\n",
		c.Sessions, c.Rate, c.Replicas, c.MaxEntries, c.Failed, c.Elapsed.Round(time.Second))
	if c.FirstErr != "" {
		fmt.Fprintf(&b, "The first failure: %s.\n\n", c.FirstErr)
	}
	fmt.Fprintf(&b, "%d requests were sent again by the client's transport after a reused keep-alive connection closed before any response byte (they are marked idempotent).\n\n", c.Replayed)
	b.WriteString("Goroutines and open file descriptors are sampled at rest, after each part's last response, with idle connections closed.\n\n")
	b.WriteString("| sessions so far | goroutines | open fds | heap in use | RSS | bindings held | p50 | p99 |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range c.Samples {
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %s | %s | %.0f | %s | %s |\n", s.Sessions, s.Goroutines, s.OpenFDs,
			mib(s.HeapBytes), mib(s.RSSBytes), s.Bindings, round(s.P50), round(s.P99))
	}
	b.WriteString("\n")
	return b.String()
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func round(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}

// Write writes the report to dir/name and, when readme is not empty,
// replaces its block (ReplaceBlock) with the summary.
func (r *Report) Write(dir, name, readme, block, command string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(r.Markdown(command)), 0o644); err != nil {
		return err
	}
	if readme == "" {
		return nil
	}
	return ReplaceBlock(readme, block, r.Summary())
}

// ReplaceBlock replaces the text between <!-- name:begin --> and
// <!-- name:end --> in the file.
func ReplaceBlock(path, name, text string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin, end := "<!-- "+name+":begin -->", "<!-- "+name+":end -->"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s … %s block", path, begin, end)
	}
	s = s[:i+len(begin)] + "\n" + text + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}

// Between are the records of turns started in [from, to).
func Between(records []Record, from, to time.Time) []Record {
	var out []Record
	for _, r := range records {
		if !r.Start.Before(from) && r.Start.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// Failures are the failed records.
func Failures(records []Record) []Record {
	var out []Record
	for _, r := range records {
		if r.Failed() {
			out = append(out, r)
		}
	}
	return out
}

// Moved counts the sessions with a successful turn started in [from, to)
// on another backend than the session's previous successful turn.
func Moved(records []Record, from, to time.Time) int { return len(MovedSessions(records, from, to)) }

// MovedSessions are the sessions Moved counts.
func MovedSessions(records []Record, from, to time.Time) []string {
	sorted := slices.Clone(records)
	slices.SortFunc(sorted, func(a, b Record) int { return a.Start.Compare(b.Start) })
	last := map[string]string{}
	moved := map[string]bool{}
	for _, r := range sorted {
		if r.Failed() {
			continue
		}
		if prev, ok := last[r.Session]; ok && prev != r.Backend && !r.Start.Before(from) && r.Start.Before(to) {
			moved[r.Session] = true
		}
		last[r.Session] = r.Backend
	}
	return slices.Sorted(maps.Keys(moved))
}

// Affinity is how well the sessions' later turns (every turn but a
// session's first) started in [from, to) kept their cache: how many of
// them succeeded, how many of those went to the backend of the session's
// previous successful turn, and the share of their prompt tokens the
// backends reported cached (usage.prompt_tokens_details.cached_tokens;
// -1 without reports).
func Affinity(records []Record, from, to time.Time) (later, stayed int, hit float64) {
	sorted := slices.Clone(records)
	slices.SortFunc(sorted, func(a, b Record) int { return a.Start.Compare(b.Start) })
	last := map[string]string{}
	var prompt, cached int
	for _, r := range sorted {
		if r.Failed() {
			continue
		}
		prev, seen := last[r.Session]
		last[r.Session] = r.Backend
		if r.Turn < 2 || r.Start.Before(from) || !r.Start.Before(to) {
			continue
		}
		later++
		if seen && prev == r.Backend {
			stayed++
		}
		prompt += r.PromptTokens
		cached += r.CachedTokens
	}
	if prompt == 0 {
		return later, stayed, -1
	}
	return later, stayed, float64(cached) / float64(prompt)
}
