package dryrun

import (
	"strconv"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Instance is one step instance a dry run reached.
type Instance struct {
	Step  *spec.Step
	Key   string     // the instance key, "per_file[1].export"
	Depth int        // nesting: 0 for a top-level step, +1 inside a control step
	Row   store.Step // as the executor wrote it
	// Output is Row.Output decoded; nil when it has none.
	Output any
	// Items is, for a foreach, how many iterations it has: the larger of those that left a row
	// and the length of its output list; 0 for other kinds.
	Items int
	// Taken is, for a branch, the list its output says it took ("then" or "else"); "" otherwise.
	Taken string
}

// Order lists the step instances of s that rows (a dry run's Outcome.Steps) reached, in the
// order a run would start them: a list in dependency order (ties in document order; the children
// of a parallel step wait only for their own depends_on), each foreach iteration after the one
// before, a control step before its children, a branch's taken list before the other. An
// instance without a row (the run ended before it) is left out, with what is under it.
func Order(s *spec.Spec, rows []store.Step) []Instance {
	w := &walk{rows: make(map[string]store.Step, len(rows)), iterations: map[string]int{}}
	for _, r := range rows {
		w.rows[r.Key] = r
		w.countIterations(r.Key)
	}
	w.list(s.Steps, false, "", 0)
	return w.out
}

// walk orders the step instances of a dry run by walking the spec's tree.
type walk struct {
	rows       map[string]store.Step
	iterations map[string]int // foreach instance key → iterations that left a row
	out        []Instance
}

// countIterations notes, for each foreach instance enclosing key ("a[2].b[0].c" is in iteration
// 2 of "a" and 0 of "a[2].b"), that it has at least that many iterations.
func (w *walk) countIterations(key string) {
	for i := 0; i < len(key); i++ {
		if key[i] != '[' {
			continue
		}
		end := strings.IndexByte(key[i:], ']')
		if end < 0 {
			return
		}
		n, err := strconv.Atoi(key[i+1 : i+end])
		if err == nil && n+1 > w.iterations[key[:i]] {
			w.iterations[key[:i]] = n + 1
		}
		i += end
	}
}

// list adds the instances of one step list under prefix, in dependency order (ties in document
// order). parallel: the children of a parallel step, which wait only for their own depends_on.
func (w *walk) list(steps []*spec.Step, parallel bool, prefix string, depth int) {
	deps := spec.Dependencies(steps)
	if parallel {
		for i, st := range steps {
			if !st.HasDependsOn {
				deps[i] = nil
			}
		}
	}
	done := make([]bool, len(steps))
	for left := len(steps); left > 0; left-- {
		pick := -1
		for i := range steps {
			if done[i] {
				continue
			}
			ready := true
			for _, d := range deps[i] {
				if !done[d] {
					ready = false
					break
				}
			}
			if ready {
				pick = i
				break
			}
		}
		if pick < 0 { // a cycle: refused by validation; keep the rest in document order
			for i := range steps {
				if !done[i] {
					pick = i
					break
				}
			}
		}
		done[pick] = true
		w.step(steps[pick], prefix, depth)
	}
}

func (w *walk) step(st *spec.Step, prefix string, depth int) {
	key := prefix + st.ID
	row, ok := w.rows[key]
	if !ok {
		return // never reached: the run ended before it
	}
	in := Instance{Step: st, Key: key, Depth: depth, Row: row}
	if len(row.Output) > 0 {
		in.Output, _ = spec.DecodeValue(row.Output) // written by the executor: valid JSON
	}
	switch st.Kind {
	case spec.KindForeach:
		in.Items = w.iterations[key]
		if items, ok := in.Output.([]any); ok {
			in.Items = max(in.Items, len(items))
		}
	case spec.KindBranch:
		if m, ok := in.Output.(map[string]any); ok {
			in.Taken, _ = m["taken"].(string)
		}
	}
	w.out = append(w.out, in)
	switch st.Kind {
	case spec.KindForeach:
		for i := range w.iterations[key] {
			w.list(st.Steps, false, key+"["+strconv.Itoa(i)+"].", depth+1)
		}
	case spec.KindParallel:
		w.list(st.Steps, true, prefix, depth+1)
	case spec.KindBranch:
		first, second := st.Then, st.Else
		if in.Taken == "else" {
			first, second = st.Else, st.Then
		}
		w.list(first, false, prefix, depth+1)
		w.list(second, false, prefix, depth+1)
	}
}
