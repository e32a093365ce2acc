package engine

import (
	"context"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/catalog"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// CatalogEntry describes a registered workflow.
type CatalogEntry struct {
	Name        string      `json:"name"`
	Description string      `json:"description,omitempty"`
	SpecHash    string      `json:"spec_hash"`
	Version     int         `json:"version"` // its version number (1, 2, … per name)
	Steps       int         `json:"steps"`   // steps in the whole tree
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
// (else code invalid_request). The catalog is kept in the engine's database, so it outlives the
// process, with every version of each workflow (a version is one spec hash; see
// WorkflowVersions); a read-only engine keeps what it registers in memory only. A database
// write that fails is code storage, and the catalog is left as it was.
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
	if e.isClosed() {
		return errClosed()
	}
	return e.catalog.Register(s)
}

// Unregister removes a workflow from the catalog and reports whether it was there. Its versions
// stay known (WorkflowVersions), for the runs that used them.
func (e *Engine) Unregister(name string) bool { return e.catalog.Unregister(name) }

// newCatalog makes the engine's catalog on its store (catalog.go).
func (e *Engine) newCatalog() *catalog.Catalog {
	c, _ := e.store.(store.Catalog)
	return catalog.New(catalog.Config{Store: c, ReadOnly: e.cfg.ReadOnly, Clock: e.clock, Closed: e.isClosed})
}

// WorkflowVersion is one version of a workflow of the catalog: a spec hash under a name.
type WorkflowVersion struct {
	Name         string    `json:"name"`
	Version      int       `json:"version"` // 1, 2, … per name, in the order first registered
	SpecHash     string    `json:"spec_hash"`
	Description  string    `json:"description,omitempty"`
	RegisteredAt time.Time `json:"registered_at"` // when it last became current
	Current      bool      `json:"current"`       // the version a run by name uses
}

// WorkflowVersions lists the versions of the workflow name ("" = of every workflow), by name and
// newest version first, including those of unregistered workflows (an in-memory engine: those
// registered since Open). A store without a catalog has none.
func (e *Engine) WorkflowVersions(ctx context.Context, name string) ([]WorkflowVersion, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	vs, err := e.catalog.Versions(ctx, name)
	if err != nil || vs == nil { // vs is nil without a catalog in the store, else a list
		return nil, err
	}
	out := make([]WorkflowVersion, len(vs))
	for i, v := range vs {
		out[i] = WorkflowVersion{Name: v.Name, Version: v.Version, SpecHash: v.SpecHash, Description: v.Description,
			RegisteredAt: v.RegisteredAt, Current: v.Current}
	}
	return out, nil
}

// Workflow returns the registered workflow with that exact name.
func (e *Engine) Workflow(name string) (*spec.Spec, bool) { return e.catalog.Get(name) }

// Lookup searches the catalog: every word of query must appear, case-insensitively, in a
// workflow's name or description. "" lists every workflow. Results come best first: an exact
// name, then names starting with the query, then names containing it, then description
// matches; ties by name.
func (e *Engine) Lookup(query string) []CatalogEntry {
	found := e.catalog.Lookup(query)
	out := make([]CatalogEntry, len(found))
	for i, item := range found {
		out[i] = catalogEntry(item)
	}
	return out
}

func catalogEntry(item catalog.Entry) CatalogEntry {
	s := item.Spec
	c := CatalogEntry{Name: s.Name, Description: s.Description, SpecHash: s.Hash(), Version: item.Version, Steps: s.StepCount()}
	for _, in := range s.Inputs {
		c.Inputs = append(c.Inputs, InputInfo{Name: in.Name, Type: in.Type, Required: in.Required, Default: in.Default,
			Format: in.Format, Description: in.Description})
	}
	return c
}
