package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
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
	e.catalogMu.Lock() // one registration at a time, so the store and the map agree
	defer e.catalogMu.Unlock()
	version := 0
	if c := e.catalogStore(); c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), catalogWriteTimeout)
		defer cancel()
		w, err := c.SaveWorkflow(ctx, store.WorkflowVersion{Name: s.Name, SpecHash: s.Hash(), Spec: s.Canonical(),
			Description: s.Description, RegisteredAt: e.clock.Now()})
		if err != nil {
			return storageError(fmt.Sprintf("registering workflow %s", s.Name), err)
		}
		version = w.Version
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errClosed()
	}
	if version == 0 { // no catalog in the store: number the versions in memory
		version = e.versions.next(s.Name, s.Hash())
	}
	e.versions.set(s.Name, s.Hash(), version)
	e.catalog[s.Name] = catalogItem{spec: s, version: version}
	return nil
}

// catalogWriteTimeout bounds a catalog write (Register, Unregister), which has no context.
const catalogWriteTimeout = 30 * time.Second

// Unregister removes a workflow from the catalog and reports whether it was there. Its versions
// stay known (WorkflowVersions), for the runs that used them.
func (e *Engine) Unregister(name string) bool {
	e.catalogMu.Lock()
	defer e.catalogMu.Unlock()
	if c := e.catalogStore(); c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), catalogWriteTimeout)
		defer cancel()
		_, _ = c.RemoveWorkflow(ctx, name) // a failed write leaves it in the database, not in memory
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.catalog[name]
	delete(e.catalog, name)
	return ok
}

// catalogStore is the store's catalog, or nil when the engine is read-only (it registers in
// memory only) or the store has none.
func (e *Engine) catalogStore() store.Catalog {
	if e.cfg.ReadOnly {
		return nil
	}
	c, _ := e.store.(store.Catalog)
	return c
}

// loadCatalog fills the catalog from the database at Open: the current version of each
// workflow, and the numbers of all versions. A stored spec this engine cannot parse any more
// (an older engine accepted it) stays out of the catalog and in the database; registering it
// again replaces it.
func (e *Engine) loadCatalog(ctx context.Context) error {
	c, ok := e.store.(store.Catalog)
	if !ok {
		return nil
	}
	vs, err := c.WorkflowVersions(ctx, "")
	if err != nil {
		return storageError("reading the workflow catalog", err)
	}
	for _, v := range vs {
		e.versions.set(v.Name, v.SpecHash, v.Version)
		if !v.Current {
			continue
		}
		s, err := spec.Parse(v.Spec, spec.Options{Source: "catalog:" + v.Name})
		if err != nil {
			continue
		}
		e.catalog[v.Name] = catalogItem{spec: s, version: v.Version}
	}
	return nil
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
	if c, ok := e.store.(store.Catalog); ok {
		vs, err := c.WorkflowVersions(ctx, name)
		if err != nil {
			return nil, storageError("reading the workflow catalog", err)
		}
		out := make([]WorkflowVersion, len(vs))
		for i, v := range vs {
			out[i] = WorkflowVersion{Name: v.Name, Version: v.Version, SpecHash: v.SpecHash, Description: v.Description,
				RegisteredAt: v.RegisteredAt, Current: v.Current}
		}
		return out, nil
	}
	return nil, nil
}

// workflowVersion is the catalog version of the workflow name with that spec hash, 0 when it
// was never registered (a run of an unregistered spec). A read-only engine looks in the
// database once more when it does not know the pair, since its owner may have registered it.
func (e *Engine) workflowVersion(ctx context.Context, name, hash string) int {
	e.mu.Lock()
	v := e.versions.get(name, hash)
	e.mu.Unlock()
	if v != 0 || !e.cfg.ReadOnly {
		return v
	}
	c, ok := e.store.(store.Catalog)
	if !ok {
		return 0
	}
	vs, err := c.WorkflowVersions(ctx, name)
	if err != nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, w := range vs {
		e.versions.set(w.Name, w.SpecHash, w.Version)
	}
	return e.versions.get(name, hash)
}

// catalogItem is a workflow of the catalog: its spec and version number.
type catalogItem struct {
	spec    *spec.Spec
	version int
}

// versionIndex numbers the spec hashes registered under each name. Its zero value is empty.
type versionIndex map[string]map[string]int

func (x *versionIndex) set(name, hash string, version int) {
	if *x == nil {
		*x = versionIndex{}
	}
	if (*x)[name] == nil {
		(*x)[name] = map[string]int{}
	}
	(*x)[name][hash] = version
}

func (x versionIndex) get(name, hash string) int { return x[name][hash] }

// next is the version hash has under name, or the next free number.
func (x versionIndex) next(name, hash string) int {
	if v := x[name][hash]; v != 0 {
		return v
	}
	return len(x[name]) + 1
}

// Workflow returns the registered workflow with that exact name.
func (e *Engine) Workflow(name string) (*spec.Spec, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	item, ok := e.catalog[name]
	return item.spec, ok
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
	for name, item := range e.catalog {
		lname, hay := strings.ToLower(name), strings.ToLower(name+" "+item.spec.Description)
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
		found = append(found, scored{rank, catalogEntry(item)})
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

func catalogEntry(item catalogItem) CatalogEntry {
	s := item.spec
	c := CatalogEntry{Name: s.Name, Description: s.Description, SpecHash: s.Hash(), Version: item.version, Steps: s.StepCount()}
	for _, in := range s.Inputs {
		c.Inputs = append(c.Inputs, InputInfo{Name: in.Name, Type: in.Type, Required: in.Required, Default: in.Default,
			Format: in.Format, Description: in.Description})
	}
	return c
}

// storageError reports a failed catalog read or write: code storage for a database fault (a
// full disk, a corrupted file), closed for a closed store, else internal; the message says what
// was being done.
func storageError(doing string, err error) error {
	if errors.Is(err, store.ErrClosed) {
		return errClosed()
	}
	code := run.CodeInternal
	if storeopen.IsFault(err) {
		code = run.CodeStorage
	}
	return &run.Error{Code: code, Message: doing + ": " + err.Error(), Err: err}
}
