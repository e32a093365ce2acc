package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// ExerciseCatalog runs the suite of store.Catalog. newCatalog must return a new, empty catalog
// for each call (the suite does not close it: close it in t.Cleanup).
func ExerciseCatalog(t *testing.T, newCatalog func(t *testing.T) store.Catalog) {
	t.Helper()
	t.Run("CatalogVersions", func(t *testing.T) {
		t.Parallel()
		testCatalog(t, newCatalog(t))
	})
}

func testCatalog(t *testing.T, c store.Catalog) {
	ctx := context.Background()
	if vs, err := c.WorkflowVersions(ctx, ""); err != nil || len(vs) != 0 {
		t.Fatalf("versions of an empty catalog = %+v, %v", vs, err)
	}
	if ok, err := c.RemoveWorkflow(ctx, "nope"); ok || err != nil {
		t.Fatalf("RemoveWorkflow of an unknown name = %v, %v", ok, err)
	}
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	save := func(name, hash string, s int, wantVersion int) {
		t.Helper()
		w, err := c.SaveWorkflow(ctx, store.WorkflowVersion{Name: name, SpecHash: hash, Spec: []byte(`{"name":"` + name + `","h":"` + hash + `"}`),
			Description: "d " + hash, RegisteredAt: at(s)})
		if err != nil {
			t.Fatal(err)
		}
		if w.Version != wantVersion || !w.Current || w.Name != name || w.SpecHash != hash {
			t.Fatalf("SaveWorkflow(%s, %s) = %+v; want version %d, current", name, hash, w, wantVersion)
		}
	}
	save("intake", "h1", 1, 1)
	save("intake", "h2", 2, 2)
	save("cleanup", "c1", 3, 1)
	save("intake", "h1", 4, 1) // an older spec again: its number, current again
	type row struct {
		name    string
		version int
		hash    string
		current bool
		at      time.Time
	}
	rows := func(name string) []row {
		t.Helper()
		vs, err := c.WorkflowVersions(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		var out []row
		for _, v := range vs {
			if string(v.Spec) != `{"name":"`+v.Name+`","h":"`+v.SpecHash+`"}` || v.Description != "d "+v.SpecHash {
				t.Fatalf("version %+v: spec %s", v, v.Spec)
			}
			out = append(out, row{v.Name, v.Version, v.SpecHash, v.Current, v.RegisteredAt.UTC()})
		}
		return out
	}
	want := []row{
		{"cleanup", 1, "c1", true, at(3)},
		{"intake", 2, "h2", false, at(2)},
		{"intake", 1, "h1", true, at(4)},
	}
	if got := rows(""); !slices.Equal(got, want) {
		t.Fatalf("every version:\n got %+v\nwant %+v", got, want)
	}
	if got := rows("intake"); !slices.Equal(got, want[1:]) {
		t.Fatalf("versions of intake:\n got %+v\nwant %+v", got, want[1:])
	}
	if ok, err := c.RemoveWorkflow(ctx, "intake"); !ok || err != nil {
		t.Fatalf("RemoveWorkflow = %v, %v", ok, err)
	}
	if ok, _ := c.RemoveWorkflow(ctx, "intake"); ok {
		t.Fatal("RemoveWorkflow twice reported a removal")
	}
	got := rows("intake")
	if len(got) != 2 || got[0].current || got[1].current {
		t.Fatalf("a removed workflow keeps its versions, none current: %+v", got)
	}
	save("intake", "h3", 5, 3) // registered again: numbering goes on
}
