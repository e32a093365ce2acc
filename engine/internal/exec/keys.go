package exec

import "strings"

// Step instance keys. The executor names every step instance by its key (store.Step.Key): the
// step id for a step outside any foreach ("export"), else the keys of the enclosing foreach
// iterations, each "<foreach id>[<index>].", then the step id ("per_file[3].export",
// "outer[1].inner[2].leaf"; frame.go builds them). This file is the one place that reads them.

// InIteration reports whether key names an instance inside a foreach iteration
// ("per_file[3].export"), not a step of the run's top level or of its parallel and branch
// blocks ("export").
func InIteration(key string) bool { return strings.IndexByte(key, '[') >= 0 }

// EnclosingKeys returns the instance keys of the steps that enclose key, outermost first: the
// foreach of each iteration it is in, and the foreach instance that holds a nested one.
// "a[1].b[2].c" → "a", "a[1].b"; a top-level key → none.
func EnclosingKeys(key string) []string {
	var out []string
	for i := 0; i < len(key); i++ {
		if key[i] != '.' {
			continue
		}
		prefix := key[:i]
		if j := strings.LastIndexByte(prefix, '['); j > 0 && strings.HasSuffix(prefix, "]") {
			prefix = prefix[:j]
		}
		out = append(out, prefix)
	}
	return out
}

// eachEnclosingForeach calls fn with the key of every foreach instance key is inside,
// outermost first, without allocating: "fan[2].g[0].x" → "fan", "fan[2].g".
func eachEnclosingForeach(key string, fn func(foreachKey string)) {
	for i := range len(key) {
		if key[i] == '[' {
			fn(key[:i])
		}
	}
}

// OnFailurePrefix starts the instance key of every on_failure step: "on_failure.alert",
// "on_failure.notify_each[2].post". No other key has it: step ids contain no dot, and a foreach
// whose id is on_failure has keys "on_failure[3]…".
const OnFailurePrefix = "on_failure."

// IsOnFailure reports whether key names an instance of an on_failure step.
func IsOnFailure(key string) bool { return strings.HasPrefix(key, OnFailurePrefix) }
