// Package jsonscan reads a few values out of a JSON document in one pass,
// without decoding the rest: the values at a fixed set of dotted paths
// into the top-level object ("model", "metadata.session_id"). It validates
// the whole document as it goes (the grammar of RFC 8259, as
// encoding/json), holds only the values it was asked for and a stack of
// the open containers, and takes its input in pieces of any size, so it
// serves both a request body tether already holds and a response body
// watched as it streams by.
//
// A value it reports is the one encoding/json would decode into a
// map[string]any at that path: keys are matched exactly (after
// unescaping), a key repeated in an object counts with its last
// occurrence, and arrays are never descended into.
package jsonscan

import (
	"fmt"
	"strings"
)

// MaxPathBytes bounds a path's text; MaxPathSegments its depth.
const (
	MaxPathBytes    = 256
	MaxPathSegments = 8
)

// Paths is a compiled set of dotted paths, immutable and safe for
// concurrent use. A path's index is its position in the list given to
// Compile, after duplicates were dropped (Index finds it).
type Paths struct {
	nodes   []node
	paths   []string
	index   map[string]int
	maxName int // the longest segment, bounding key captures
}

// node is one object on some path: node 0 is the top-level object.
type node struct {
	children map[string]int32
	leaf     int32   // index of the path ending here, or -1
	under    []int32 // indexes of every path ending here or below
}

// ValidatePath checks one dotted path: non-empty segments separated by
// '.', within MaxPathBytes and MaxPathSegments. The error says which rule.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("a body path must not be empty")
	case len(p) > MaxPathBytes:
		return fmt.Errorf("a body path must be at most %d bytes, got %d", MaxPathBytes, len(p))
	}
	segs := strings.Split(p, ".")
	if len(segs) > MaxPathSegments {
		return fmt.Errorf("a body path has at most %d segments, %q has %d", MaxPathSegments, p, len(segs))
	}
	for _, s := range segs {
		if s == "" {
			return fmt.Errorf("%q has an empty segment (write field.subfield, no leading, trailing or double dots)", p)
		}
	}
	return nil
}

// Compile compiles paths (each checked by ValidatePath); duplicates are
// dropped.
func Compile(paths ...string) (*Paths, error) {
	p := &Paths{nodes: []node{{leaf: -1}}, index: map[string]int{}}
	for _, path := range paths {
		if err := ValidatePath(path); err != nil {
			return nil, err
		}
		if _, dup := p.index[path]; dup {
			continue
		}
		i := int32(len(p.paths))
		p.index[path] = int(i)
		p.paths = append(p.paths, path)
		n := int32(0)
		p.nodes[0].under = append(p.nodes[0].under, i)
		for _, seg := range strings.Split(path, ".") {
			p.maxName = max(p.maxName, len(seg))
			c, ok := p.nodes[n].children[seg]
			if !ok {
				c = int32(len(p.nodes))
				p.nodes = append(p.nodes, node{leaf: -1})
				if p.nodes[n].children == nil {
					p.nodes[n].children = map[string]int32{}
				}
				p.nodes[n].children[seg] = c
			}
			n = c
			p.nodes[n].under = append(p.nodes[n].under, i)
		}
		p.nodes[n].leaf = i
	}
	return p, nil
}

// MustCompile is Compile for paths known to be valid; it panics otherwise.
func MustCompile(paths ...string) *Paths {
	p, err := Compile(paths...)
	if err != nil {
		panic(err)
	}
	return p
}

// Len is the number of distinct paths.
func (p *Paths) Len() int { return len(p.paths) }

// Index returns the index of path, or -1 when it is not one of p's.
func (p *Paths) Index(path string) int {
	if i, ok := p.index[path]; ok {
		return i
	}
	return -1
}

// Path returns the path of index i.
func (p *Paths) Path(i int) string { return p.paths[i] }
