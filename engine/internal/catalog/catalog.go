// Package catalog is the engine's workflow catalog: the workflows registered by name, the
// version number of every (name, spec hash) pair known, and the checks of the workflows a spec's
// workflow steps name (recursion, unregistered workflows). It keeps the catalog in the store's
// optional store.Catalog feature when there is one, so the catalog outlives the process, and in
// memory otherwise. It knows nothing of runs or of the executor: the caller passes what a check
// needs from them (a tool check).
package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Config is what a Catalog is built from.
type Config struct {
	// Store is the store's catalog, nil when the store has none: the catalog is then kept in
	// memory only and has no versions to list.
	Store store.Catalog
	// ReadOnly keeps what Register and Unregister do in memory (Store is only read), and makes
	// Version look in Store once more for a pair it does not know, since the database's owner
	// may have registered it.
	ReadOnly bool
	// Clock stamps the versions Register saves (RegisteredAt); nil is the real clock.
	Clock clock.Clock
	// Closed reports whether the owner has been closed: a Register whose store write finds it
	// closed leaves the catalog in memory as it was and fails with code closed. Nil: never.
	Closed func() bool
}

// Catalog is the workflow catalog. Its methods are safe for concurrent use.
type Catalog struct {
	store    store.Catalog
	readOnly bool
	clock    clock.Clock
	closed   func() bool

	writeMu  sync.Mutex // one Register or Unregister at a time, so the store and the map agree
	mu       sync.Mutex // guards items and versions
	items    map[string]Entry
	versions versionIndex // the version numbers of every (name, spec hash) known
}

// Entry is a workflow of the catalog: its spec and version number.
type Entry struct {
	Spec    *spec.Spec
	Version int
}

// WriteTimeout bounds a catalog write (Register, Unregister), which has no context.
const WriteTimeout = 30 * time.Second

// New returns an empty catalog; Load fills it from the store.
func New(cfg Config) *Catalog {
	c := &Catalog{store: cfg.Store, readOnly: cfg.ReadOnly, clock: cfg.Clock, closed: cfg.Closed, items: map[string]Entry{}}
	if c.clock == nil {
		c.clock = clock.New()
	}
	if c.closed == nil {
		c.closed = func() bool { return false }
	}
	return c
}

// Load fills the catalog from the store (read-only or not): the current version of each
// workflow, and the numbers of all versions. A stored spec this engine cannot parse any more (an
// older engine accepted it) stays out of the catalog and in the database; registering it again
// replaces it. Without a store it does nothing. A failed read is a *run.Error of code storage,
// closed or internal (storageError).
func (c *Catalog) Load(ctx context.Context) error {
	if c.store == nil {
		return nil
	}
	vs, err := c.store.WorkflowVersions(ctx, "")
	if err != nil {
		return storageError("reading the workflow catalog", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range vs {
		c.versions.set(v.Name, v.SpecHash, v.Version)
		if !v.Current {
			continue
		}
		s, err := spec.Parse(v.Spec, spec.Options{Source: "catalog:" + v.Name})
		if err != nil {
			continue
		}
		c.items[v.Name] = Entry{Spec: s, Version: v.Version}
	}
	return nil
}

// writer is the store Register and Unregister write to: nil when read-only or without a store.
func (c *Catalog) writer() store.Catalog {
	if c.readOnly {
		return nil
	}
	return c.store
}

// Register makes s, a valid named spec (the caller checks), the current workflow of its name.
// A spec whose workflow steps lead back to itself through the catalog is refused
// (CheckRecursion); one naming a workflow not registered yet is not. The store keeps every
// version; without one (or read-only) the versions are numbered in memory, from 1 per name. A
// store write that fails is a *run.Error of code storage, closed or internal (storageError), and
// leaves the catalog as it was.
func (c *Catalog) Register(s *spec.Spec) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if err := c.CheckRecursion(s, s.Name); err != nil {
		return err
	}
	version := 0
	if w := c.writer(); w != nil {
		ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout)
		defer cancel()
		v, err := w.SaveWorkflow(ctx, store.WorkflowVersion{Name: s.Name, SpecHash: s.Hash(), Spec: s.Canonical(),
			Description: s.Description, RegisteredAt: c.clock.Now()})
		if err != nil {
			return storageError(fmt.Sprintf("registering workflow %s", s.Name), err)
		}
		version = v.Version
	}
	if c.closed() {
		return errClosed()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if version == 0 { // no catalog in the store: number the versions in memory
		version = c.versions.next(s.Name, s.Hash())
	}
	c.versions.set(s.Name, s.Hash(), version)
	c.items[s.Name] = Entry{Spec: s, Version: version}
	return nil
}

// Unregister removes a workflow from the catalog and reports whether it was there. Its versions
// stay known. A store write that fails leaves it in the database, not in memory.
func (c *Catalog) Unregister(name string) bool {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if w := c.writer(); w != nil {
		ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout)
		defer cancel()
		_, _ = w.RemoveWorkflow(ctx, name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.items[name]
	delete(c.items, name)
	return ok
}

// Get returns the registered workflow with that exact name.
func (c *Catalog) Get(name string) (*spec.Spec, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	item, ok := c.items[name]
	return item.Spec, ok
}

// Versions lists the versions of the workflow name ("" = of every workflow) the store keeps, by
// name and newest version first, including those of unregistered workflows: nil without a
// store, else a list that is not nil (empty when there are none). A failed read is a *run.Error
// of code storage, closed or internal (storageError).
func (c *Catalog) Versions(ctx context.Context, name string) ([]store.WorkflowVersion, error) {
	if c.store == nil {
		return nil, nil
	}
	vs, err := c.store.WorkflowVersions(ctx, name)
	if err != nil {
		return nil, storageError("reading the workflow catalog", err)
	}
	if vs == nil {
		vs = []store.WorkflowVersion{}
	}
	return vs, nil
}

// Version is the version number of the workflow name with that spec hash, 0 when it was never
// registered (a run of an unregistered spec). A read-only catalog looks in the store once more
// when it does not know the pair; a failed read is 0.
func (c *Catalog) Version(ctx context.Context, name, hash string) int {
	c.mu.Lock()
	v := c.versions.get(name, hash)
	c.mu.Unlock()
	if v != 0 || !c.readOnly || c.store == nil {
		return v
	}
	vs, err := c.store.WorkflowVersions(ctx, name)
	if err != nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range vs {
		c.versions.set(w.Name, w.SpecHash, w.Version)
	}
	return c.versions.get(name, hash)
}

// Lookup searches the catalog: every word of query must appear, case-insensitively, in a
// workflow's name or description. "" lists every workflow. Results come best first: an exact
// name, then names starting with the query, then names containing it, then description
// matches; ties by name.
func (c *Catalog) Lookup(query string) []Entry {
	words := strings.Fields(strings.ToLower(query))
	q := strings.ToLower(strings.TrimSpace(query))
	type scored struct {
		rank  int
		entry Entry
	}
	var found []scored
	c.mu.Lock()
	for name, item := range c.items {
		lname, hay := strings.ToLower(name), strings.ToLower(name+" "+item.Spec.Description)
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
		found = append(found, scored{rank, item})
	}
	c.mu.Unlock()
	slices.SortFunc(found, func(a, b scored) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return strings.Compare(a.entry.Spec.Name, b.entry.Spec.Name)
	})
	out := make([]Entry, len(found))
	for i, f := range found {
		out[i] = f.entry
	}
	return out
}

// Suggest returns the registered workflow name closest to a name that is not registered: one
// within two edits (a typo), else the best match of Lookup's word search, else "".
func (c *Catalog) Suggest(name string) string {
	c.mu.Lock()
	names := make([]string, 0, len(c.items))
	for n := range c.items {
		names = append(names, n)
	}
	c.mu.Unlock()
	slices.Sort(names)
	if sug := yamltext.Suggest(name, names); sug != "" {
		return sug
	}
	if found := c.Lookup(name); len(found) > 0 {
		return found[0].Spec.Name
	}
	return ""
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

// storageError reports a failed catalog read or write: code storage for a database fault (a full
// disk, a corrupted file), closed for a closed store, else internal; the message says what was
// being done.
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

// errClosed is the engine's error for a call after Close: the catalog is closed with its engine.
func errClosed() error { return run.Errorf(run.CodeClosed, "the engine is closed") }
