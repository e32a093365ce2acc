package catalog_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/catalog"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func parse(t *testing.T, text string) *spec.Spec {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// memCatalog is the memory store's catalog feature.
func memCatalog(t *testing.T) store.Catalog {
	t.Helper()
	st := storeopen.Memory()
	t.Cleanup(func() { _ = st.Close() })
	c, ok := st.(store.Catalog)
	if !ok {
		t.Fatal("the memory store has no catalog")
	}
	return c
}

func echo(name, v string) string {
	return "name: " + name + "\nsteps: [{id: a, tool: flow__echo, args: {v: " + v + "}}]"
}

// Without a store the versions are numbered in memory: a new spec hash gets the next number, a
// known one keeps its own, and Unregister keeps the numbers.
func TestRegisterInMemoryNumbersVersions(t *testing.T) {
	c := catalog.New(catalog.Config{})
	v1, v2 := parse(t, echo("intake", "1")), parse(t, echo("intake", "2"))
	for i, s := range []*spec.Spec{v1, v2, v1} {
		if err := c.Register(s); err != nil {
			t.Fatalf("register %d: %v", i, err)
		}
	}
	if got, ok := c.Get("intake"); !ok || got != v1 {
		t.Fatalf("Get after re-registering v1: %v %v", got, ok)
	}
	if v := c.Version(context.Background(), "intake", v1.Hash()); v != 1 {
		t.Fatalf("v1 is version %d", v)
	}
	if v := c.Version(context.Background(), "intake", v2.Hash()); v != 2 {
		t.Fatalf("v2 is version %d", v)
	}
	if found := c.Lookup("intake"); len(found) != 1 || found[0].Version != 1 || found[0].Spec != v1 {
		t.Fatalf("Lookup: %+v", found)
	}
	if vs, err := c.Versions(context.Background(), ""); vs != nil || err != nil {
		t.Fatalf("versions without a store: %v %v", vs, err)
	}
	if !c.Unregister("intake") || c.Unregister("intake") {
		t.Fatal("Unregister reports whether the workflow was there")
	}
	if _, ok := c.Get("intake"); ok {
		t.Fatal("an unregistered workflow is still there")
	}
	if v := c.Version(context.Background(), "intake", v2.Hash()); v != 2 {
		t.Fatalf("after Unregister v2 is version %d", v)
	}
	if v := c.Version(context.Background(), "intake", "no-such-hash"); v != 0 {
		t.Fatalf("an unknown pair is version %d", v)
	}
}

// With a store every version is saved, stamped by the clock, and a new catalog on the same
// store loads the current version of each workflow and the numbers of all.
func TestRegisterOnAStoreAndLoad(t *testing.T) {
	ctx := context.Background()
	st := memCatalog(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := clock.NewStub(t0)
	c := catalog.New(catalog.Config{Store: st, Clock: clk})
	if vs, err := c.Versions(ctx, "intake"); err != nil || vs == nil || len(vs) != 0 {
		t.Fatalf("no versions on a store: want an empty list, got %#v %v", vs, err)
	}
	v1, v2, other := parse(t, echo("intake", "1")), parse(t, echo("intake", "2")), parse(t, echo("cleanup", "0"))
	for _, s := range []*spec.Spec{v1, v2, other} {
		clk.Advance(time.Minute)
		if err := c.Register(s); err != nil {
			t.Fatal(err)
		}
	}
	if !c.Unregister("cleanup") {
		t.Fatal("Unregister cleanup")
	}
	vs, err := c.Versions(ctx, "intake")
	if err != nil || len(vs) != 2 || vs[0].Version != 2 || !vs[0].Current || vs[1].Version != 1 || vs[1].Current ||
		!vs[0].RegisteredAt.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("versions: %+v %v", vs, err)
	}

	again := catalog.New(catalog.Config{Store: st})
	if err := again.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if s, ok := again.Get("intake"); !ok || s.Hash() != v2.Hash() || s.Source() != "catalog:intake" {
		t.Fatalf("loaded intake: %v %v", s, ok)
	}
	if _, ok := again.Get("cleanup"); ok {
		t.Fatal("an unregistered workflow came back")
	}
	if v := again.Version(ctx, "intake", v1.Hash()); v != 1 {
		t.Fatalf("loaded v1 is version %d", v)
	}
	if v := again.Version(ctx, "cleanup", other.Hash()); v != 1 {
		t.Fatalf("an unregistered workflow's version: %d", v)
	}
	v3 := parse(t, echo("intake", "3"))
	if err := again.Register(v3); err != nil {
		t.Fatal(err)
	}
	if found := again.Lookup("intake"); len(found) != 1 || found[0].Version != 3 {
		t.Fatalf("a new spec after Load: %+v", found)
	}
}

// Load leaves out a stored spec this engine cannot parse, and keeps its version number.
func TestLoadSkipsAnUnparsableSpec(t *testing.T) {
	ctx := context.Background()
	st := memCatalog(t)
	if _, err := st.SaveWorkflow(ctx, store.WorkflowVersion{Name: "old", SpecHash: "h1", Spec: []byte("{not a spec")}); err != nil {
		t.Fatal(err)
	}
	c := catalog.New(catalog.Config{Store: st})
	if err := c.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get("old"); ok {
		t.Fatal("an unparsable spec is in the catalog")
	}
	if v := c.Version(ctx, "old", "h1"); v != 1 {
		t.Fatalf("its version: %d", v)
	}
}

// A read-only catalog writes nothing, numbers in memory, and looks in the store once more for a
// pair it does not know (its owner may have registered it since).
func TestReadOnlyRegistersInMemoryAndRereadsVersions(t *testing.T) {
	ctx := context.Background()
	st := memCatalog(t)
	owner := catalog.New(catalog.Config{Store: st})
	ro := catalog.New(catalog.Config{Store: st, ReadOnly: true})
	if err := ro.Load(ctx); err != nil {
		t.Fatal(err)
	}
	mine := parse(t, echo("viewer_only", "1"))
	if err := ro.Register(mine); err != nil {
		t.Fatal(err)
	}
	if vs, _ := st.WorkflowVersions(ctx, ""); len(vs) != 0 {
		t.Fatalf("a read-only register wrote %+v", vs)
	}
	if v := ro.Version(ctx, "viewer_only", mine.Hash()); v != 1 {
		t.Fatalf("in-memory version: %d", v)
	}
	later := parse(t, echo("intake", "7"))
	if err := owner.Register(later); err != nil {
		t.Fatal(err)
	}
	if v := ro.Version(ctx, "intake", later.Hash()); v != 1 {
		t.Fatalf("a version the owner registered later, seen read-only: %d", v)
	}
	if v := ro.Version(ctx, "intake", "never"); v != 0 {
		t.Fatalf("a pair nobody registered: %d", v)
	}
	if ro.Unregister("viewer_only") != true {
		t.Fatal("read-only Unregister")
	}
}

// failingCatalog is a store catalog whose every call fails with err.
type failingCatalog struct{ err error }

func (f failingCatalog) SaveWorkflow(context.Context, store.WorkflowVersion) (store.WorkflowVersion, error) {
	return store.WorkflowVersion{}, f.err
}
func (f failingCatalog) RemoveWorkflow(context.Context, string) (bool, error) { return false, f.err }
func (f failingCatalog) WorkflowVersions(context.Context, string) ([]store.WorkflowVersion, error) {
	return nil, f.err
}

// A failed store call names what was being done, with code closed for a closed store and
// internal for another error, and a failed write leaves the catalog as it was.
func TestStoreFailures(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		code string
	}{{store.ErrClosed, run.CodeClosed}, {errors.New("boom"), run.CodeInternal}} {
		c := catalog.New(catalog.Config{Store: failingCatalog{tc.err}})
		if err := c.Load(ctx); run.CodeOf(err) != tc.code {
			t.Errorf("Load on %v: %v", tc.err, err)
		}
		err := c.Register(parse(t, echo("intake", "1")))
		if run.CodeOf(err) != tc.code {
			t.Errorf("Register on %v: %v", tc.err, err)
		}
		if tc.code == run.CodeInternal && !strings.Contains(err.Error(), "registering workflow intake: boom") {
			t.Errorf("the message: %v", err)
		}
		if _, ok := c.Get("intake"); ok {
			t.Errorf("a failed write registered the workflow")
		}
		if _, err := c.Versions(ctx, ""); run.CodeOf(err) != tc.code {
			t.Errorf("Versions on %v: %v", tc.err, err)
		}
		if c.Unregister("intake") {
			t.Errorf("Unregister of a workflow never registered")
		}
	}
}

// A registration that finds its owner closed after the store write fails with code closed and
// leaves the catalog in memory as it was.
func TestRegisterAfterCloseLeavesTheMapAlone(t *testing.T) {
	var closed atomic.Bool
	st := memCatalog(t)
	c := catalog.New(catalog.Config{Store: st, Closed: closed.Load})
	s := parse(t, echo("intake", "1"))
	closed.Store(true)
	if err := c.Register(s); run.CodeOf(err) != run.CodeClosed {
		t.Fatalf("Register when closed: %v", err)
	}
	if _, ok := c.Get("intake"); ok {
		t.Fatal("registered after close")
	}
}

// Lookup ranks an exact name, then a prefix, then a substring, then description matches, ties by
// name; every word must match. Suggest finds a typo, else Lookup's best match.
func TestLookupRanksAndSuggest(t *testing.T) {
	c := catalog.New(catalog.Config{})
	for _, text := range []string{
		"name: publish\ndescription: push to the farm\nsteps: [{id: a, tool: flow__echo}]",
		"name: publish_asset\nsteps: [{id: a, tool: flow__echo}]",
		"name: asset_publish\nsteps: [{id: a, tool: flow__echo}]",
		"name: cleanup\ndescription: publish leftovers go away\nsteps: [{id: a, tool: flow__echo}]",
		"name: abc\nsteps: [{id: a, tool: flow__echo}]",
	} {
		if err := c.Register(parse(t, text)); err != nil {
			t.Fatal(err)
		}
	}
	names := func(es []catalog.Entry) string {
		var out []string
		for _, e := range es {
			out = append(out, e.Spec.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(c.Lookup("Publish")); got != "publish,publish_asset,asset_publish,cleanup" {
		t.Fatalf("Lookup(Publish): %s", got)
	}
	if got := names(c.Lookup("")); got != "abc,asset_publish,cleanup,publish,publish_asset" {
		t.Fatalf("Lookup(\"\"): %s", got)
	}
	if got := names(c.Lookup("farm push")); got != "publish" {
		t.Fatalf("every word: %s", got)
	}
	if got := c.Suggest("publsh"); got != "publish" {
		t.Fatalf("Suggest(publsh): %q", got)
	}
	if got := c.Suggest("leftovers"); got != "cleanup" {
		t.Fatalf("Suggest(leftovers): %q", got)
	}
	if got := c.Suggest("zzzzzzzz"); got != "" {
		t.Fatalf("Suggest(zzzzzzzz): %q", got)
	}
}
