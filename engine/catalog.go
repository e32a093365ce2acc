package engine

import (
	"slices"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// CatalogEntry describes a registered workflow.
type CatalogEntry struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	SpecHash    string      `json:"spec_hash"`
	Steps       int         `json:"steps"` // steps in the whole tree
	Inputs      []InputInfo `json:"inputs,omitempty"`
}

// InputInfo describes a declared input of a workflow.
type InputInfo struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Required    bool   `json:"required,omitempty"`
	Default     any    `json:"default,omitempty"`
	Format      string `json:"format,omitempty"`
	Description string `json:"description,omitempty"`
}

// Register adds s to the catalog under its name, replacing a workflow of the same name, so runs
// and schedules can name it. The spec must be valid (else its *spec.ValidationError) and named
// (else code invalid_request).
func (e *Engine) Register(s *spec.Spec) error {
	if s == nil {
		return run.Errorf(run.CodeInvalidRequest, "no spec to register")
	}
	if strings.TrimSpace(s.Name) == "" {
		return run.Errorf(run.CodeInvalidRequest, "a workflow needs a `name:` to be registered in the catalog")
	}
	if err := s.Validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed()
	}
	e.catalog[s.Name] = s
	return nil
}

// Unregister removes a workflow from the catalog and reports whether it was there.
func (e *Engine) Unregister(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.catalog[name]
	delete(e.catalog, name)
	return ok
}

// Workflow returns the registered workflow with that exact name.
func (e *Engine) Workflow(name string) (*spec.Spec, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.catalog[name]
	return s, ok
}

// Lookup searches the catalog: every word of query must appear, case-insensitively, in a
// workflow's name or description. "" lists every workflow. Results come best first: an exact
// name, then names starting with the query, then names containing it, then description
// matches; ties by name.
func (e *Engine) Lookup(query string) []CatalogEntry {
	words := strings.Fields(strings.ToLower(query))
	q := strings.ToLower(strings.TrimSpace(query))
	type scored struct {
		rank  int
		entry CatalogEntry
	}
	var found []scored
	e.mu.Lock()
	for name, s := range e.catalog {
		lname, hay := strings.ToLower(name), strings.ToLower(name+" "+s.Description)
		ok := true
		for _, w := range words {
			if !strings.Contains(hay, w) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		rank := 4
		switch {
		case q == "":
			rank = 0
		case lname == q:
			rank = 0
		case strings.HasPrefix(lname, q):
			rank = 1
		case strings.Contains(lname, q):
			rank = 2
		}
		found = append(found, scored{rank, catalogEntry(s)})
	}
	e.mu.Unlock()
	slices.SortFunc(found, func(a, b scored) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return strings.Compare(a.entry.Name, b.entry.Name)
	})
	out := make([]CatalogEntry, len(found))
	for i, f := range found {
		out[i] = f.entry
	}
	return out
}

func catalogEntry(s *spec.Spec) CatalogEntry {
	c := CatalogEntry{Name: s.Name, Description: s.Description, SpecHash: s.Hash(), Steps: s.StepCount()}
	for _, in := range s.Inputs {
		c.Inputs = append(c.Inputs, InputInfo{Name: in.Name, Type: in.Type, Required: in.Required, Default: in.Default,
			Format: in.Format, Description: in.Description})
	}
	return c
}
