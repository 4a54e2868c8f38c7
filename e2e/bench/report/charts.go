package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one line of a line chart.
type Series struct {
	Name   string
	X, Y   []float64
	Dashed bool
	Color  int // palette index; series of one proxy share it
}

// Bars is one group of a grouped bar chart: one value per category.
type Bars struct {
	Name   string
	Values []float64
}

// RefLine is a horizontal reference line across a bar chart.
type RefLine struct {
	Name  string
	Y     float64
	Color int
}

const (
	chartW = 8 * vg.Inch
	chartH = 4.5 * vg.Inch
)

func newPlot(title, command, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title + "\n" + command
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

// palette is plotutil's seven colours and black, so that the hop
// charts' eight proxies each get their own.
var palette = append(slices.Clone(plotutil.DefaultColors), color.Black)

// seriesColor is the i-th colour of the palette, cycling.
func seriesColor(i int) color.Color { return palette[i%len(palette)] }

// Axes says which axes of a LineChart are logarithmic.
type Axes struct{ LogX, LogY bool }

// LineChart draws series over a shared x axis. A logarithmic axis needs
// positive values.
func LineChart(path, title, command, xLabel, yLabel string, series []Series, axes Axes) error {
	p := newPlot(title, command, xLabel, yLabel)
	if axes.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if axes.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = ticks125{}
		// Room above the data for the legend (top left): the data take
		// the lower part of the decades shown.
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, s := range series {
			for _, y := range s.Y {
				lo, hi = min(lo, y), max(hi, y)
			}
		}
		if lo > 0 && hi >= lo {
			decades := math.Log10(hi/lo) + 0.2
			p.Y.Min = lo / math.Pow(10, 0.1)
			p.Y.Max = p.Y.Min * math.Pow(10, decades/(1-legendShare(countNamed(series))))
		}
	}
	for i, s := range series {
		xys := make(plotter.XYs, len(s.X))
		for j := range s.X {
			xys[j] = plotter.XY{X: s.X[j], Y: s.Y[j]}
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		c := s.Color
		if c < 0 {
			c = i
		}
		l.Color, pts.Color = seriesColor(c), seriesColor(c)
		l.Width = vg.Points(1.5)
		pts.Shape = plotutil.Shape(c)
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(l, pts)
		if s.Name != "" { // unnamed series (a dashed companion) stay out of the legend
			p.Legend.Add(s.Name, l, pts)
		}
	}
	return p.Save(chartW, chartH, path)
}

// BarChart draws groups of bars over the categories, with reference lines.
func BarChart(path, title, command, yLabel string, categories []string, groups []Bars, refs []RefLine) error {
	p := newPlot(title, command, "", yLabel)
	p.NominalX(categories...)
	p.X.Tick.Label.Rotation = 0.35
	p.X.Tick.Label.XAlign = draw.XRight
	// About 480 points of plotting width: each category gets its share,
	// three quarters of it filled by its group of bars.
	w := vg.Points(480 / float64(max(len(categories), 1)) * 0.75 / float64(max(len(groups), 1)))
	top := 0.0
	for i, g := range groups {
		b, err := plotter.NewBarChart(plotter.Values(g.Values), w)
		if err != nil {
			return err
		}
		b.Color = seriesColor(i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(groups)-1)/2)
		p.Add(b)
		p.Legend.Add(g.Name, b)
		for _, v := range g.Values {
			top = math.Max(top, v)
		}
	}
	for _, r := range refs {
		f := plotter.NewFunction(func(float64) float64 { return r.Y })
		f.Color = darker(seriesColor(r.Color))
		f.Width = vg.Points(1.5)
		f.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(f)
		p.Legend.Add(r.Name, f)
		top = math.Max(top, r.Y)
	}
	p.Y.Min, p.Y.Max = 0, top*1.7 // room for the legend above bars and lines
	return p.Save(chartW, chartH, path)
}

func darker(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	return color.RGBA{uint8(r >> 9), uint8(g >> 9), uint8(b >> 9), 255}
}

// figure is one chart in the report: its file and caption.
type figure struct {
	File, Caption string
}

func (f figure) markdown() string {
	return fmt.Sprintf("![%s](%s)\n\n*%s*\n", f.Caption, f.File, f.Caption)
}

// countNamed is the number of series with a legend entry.
func countNamed(series []Series) int {
	n := 0
	for _, s := range series {
		if s.Name != "" {
			n++
		}
	}
	return n
}

// legendShare is the part of a chart's height a legend of n entries
// takes at its top.
func legendShare(n int) float64 { return min(float64(n)*0.05, 0.6) }

// ticks125 labels a logarithmic axis at 1, 2 and 5 of every decade it
// shows, or at the powers of ten alone when it shows more than three
// (plot.LogTicks labels only the powers of ten: one or two labels on a
// chart spanning a decade or two), with unlabelled minor ticks at the
// other integers.
type ticks125 struct{}

func (ticks125) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	// Over more than three decades 2 and 5 would crowd the axis.
	sparse := math.Log10(hi/lo) > 3
	var out []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		d := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * d
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || (!sparse && (m == 2 || m == 5)) {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			out = append(out, t)
		}
	}
	return out
}
