package spec

import (
	"fmt"
	"strings"
)

// Codes of the problems CheckResources reports. They are not problem codes of Parse (a spec
// alone cannot know which resources an engine declares), so they are kept out of problem.go.
const (
	// ResourceUnknown: a step asks for a resource the engine does not declare.
	ResourceUnknown = "unknown_resource"
	// ResourceOverLimit: a step asks for more of a resource than its limit, so it would wait
	// forever.
	ResourceOverLimit = "resource_over_limit"
)

// CheckResources checks the `resources` of every tool step against the resources an engine
// declares (name → limit, engine.Config.Resources): each name must be declared, and each amount
// at most its limit. It returns nil when every step is fine, else a *ValidationError (code
// validation_failed) whose problems name the step, the field and the fix, with a "did you
// mean" for a misspelt name, in document order. A nil or empty limits map declares nothing.
func (s *Spec) CheckResources(limits map[string]int) error {
	names := sortedKeys(limits)
	declared := quoteList(names)
	// The "did you mean" budget of validation: a spec (from MCP, say) asking for thousands of
	// undeclared names against an engine declaring thousands is still checked in linear time.
	v := &validator{suggestWork: maxSuggestWork}
	var ps problems
	check := func(st *Step, path string) {
		for _, name := range sortedKeys(st.Resources) {
			key := "resources." + name
			amount := st.Resources[name]
			limit, ok := limits[name]
			switch {
			case !ok:
				hint := "declare it in the engine settings (`resources: {" + name + ": {limit: N}}`) or remove it from the step"
				if len(names) == 0 {
					hint = "the engine declares no resources; " + hint
				} else if sug := v.suggest(name, names); sug != "" {
					hint = fmt.Sprintf("did you mean %q? The engine declares %s; or %s", sug, declared, hint)
				} else {
					hint = fmt.Sprintf("the engine declares %s; %s", declared, hint)
				}
				p := problemAt(ResourceUnknown, st.FieldPos(key), path+"."+key, st.ID,
					fmt.Sprintf("`resources` asks for %q, which the engine does not declare: %s", name, hint))
				p.Hint = hint
				ps.add(p)
			case amount > limit:
				ps.add(problemAt(ResourceOverLimit, st.FieldPos(key), path+"."+key, st.ID,
					fmt.Sprintf("`resources.%s` asks for %d but the engine's limit of %q is %d, so the step could never start: ask for at most %d, or raise the limit in the engine settings",
						name, amount, name, limit, limit)))
			}
		}
	}
	walkPaths(s.Steps, "steps", check)
	walkPaths(s.OnFailure, "on_failure", check)
	if len(ps.errs) == 0 {
		return nil
	}
	sortProblems(ps.errs)
	return &ValidationError{Code: CodeValidationFailed, Problems: ps.errs, Source: s.source}
}

// Resources returns the resources the tool steps of s ask for, name → the largest amount one
// step asks for; nil when none asks.
func (s *Spec) Resources() map[string]int {
	var out map[string]int
	s.Walk(func(st *Step, _ []*Step) bool {
		for name, amount := range st.Resources {
			if out == nil {
				out = map[string]int{}
			}
			out[name] = max(out[name], amount)
		}
		return true
	})
	return out
}

// walkPaths calls fn for every step of the list and their children, with each step's index
// path ("steps[1].then[0]").
func walkPaths(steps []*Step, path string, fn func(*Step, string)) {
	for i, st := range steps {
		p := fmt.Sprintf("%s[%d]", path, i)
		fn(st, p)
		for _, child := range childLists(st, p) {
			walkPaths(child.steps, child.path, fn)
		}
	}
}

// maxListedResources is how many declared names a problem lists; past it, "and N more".
const maxListedResources = 10

// quoteList is names quoted and joined with ", ", at most maxListedResources of them.
func quoteList(names []string) string {
	var b strings.Builder
	for i, n := range names {
		if i == maxListedResources {
			fmt.Fprintf(&b, " and %d more", len(names)-i)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", n)
	}
	return b.String()
}
