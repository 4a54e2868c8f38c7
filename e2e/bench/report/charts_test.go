package report

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// The charts are written as valid PNGs of the intended size.
func TestChartsAreValidPNGs(t *testing.T) {
	dir := t.TempDir()
	line := filepath.Join(dir, "line.png")
	if err := LineChart(line, "title", "go run ./e2e/bench x", "x", "y",
		[]Series{{Name: "a", X: []float64{1, 10, 100}, Y: []float64{3, 2, 1}}, {Name: "b", X: []float64{1, 10}, Y: []float64{1, 2}, Dashed: true}}, Axes{LogX: true, LogY: true}); err != nil {
		t.Fatal(err)
	}
	bars := filepath.Join(dir, "bars.png")
	if err := BarChart(bars, "title", "cmd", "y", []string{"p", "q", "r"},
		[]Bars{{Name: "R = 1", Values: []float64{1, 2, 3}}, {Name: "R = 3", Values: []float64{2, 3, 4}}},
		[]RefLine{{Name: "oracle", Y: 3.5}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{line, bars} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if b := img.Bounds(); b.Dx() != 768 || b.Dy() != 432 {
			t.Errorf("%s is %dx%d, want 768x432", p, b.Dx(), b.Dy())
		}
	}
}
