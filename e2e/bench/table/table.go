// Package table holds the benchmarks' result tables, written as aligned
// text on the terminal and as Markdown in the report, from the same rows.
package table

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Table is a titled grid of cells; the first column names the row.
type Table struct {
	Title string
	Head  []string
	Rows  [][]string
}

// Add appends a row.
func (t *Table) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// Text writes the title and the right-aligned columns.
func (t *Table) Text(w io.Writer) {
	if t.Title != "" {
		fmt.Fprintf(w, "\n%s\n", t.Title)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(t.Head, "\t")+"\t")
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
}

// Markdown writes the title in bold and a GitHub table, numbers right-aligned.
func (t *Table) Markdown(w io.Writer) {
	if t.Title != "" {
		fmt.Fprintf(w, "**%s**\n\n", t.Title)
	}
	fmt.Fprintf(w, "| %s |\n|", strings.Join(t.Head, " | "))
	for i := range t.Head {
		if i == 0 {
			fmt.Fprint(w, "---|")
		} else {
			fmt.Fprint(w, "---:|")
		}
	}
	fmt.Fprintln(w)
	for _, r := range t.Rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
}
