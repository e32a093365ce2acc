package engine_test

import (
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/dcc-flow/dcc-flow"

// goList runs `go list args...` in the module and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	if runtime.GOOS == "windows" {
		// The import graph is the same on every OS; the Linux run checks it. A Windows test
		// binary cross-built here and run under Wine has no go command to list packages with.
		t.Skip("the import check needs the go command; it runs on the build OS")
	}
	// go test puts its own GOROOT/bin first on the test's PATH.
	bin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the import check needs the go command on PATH: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"list"}, args...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// The engine reaches its stores through the store interfaces (store.Store and the features
// store.Pruner, store.Controller, store.FireLog) and one constructor package, storeopen: no other
// package the engine or the C library builds from imports a concrete store, and no store imports
// the scheduler (the fire history's types are the store's). A new store (PostgreSQL) then plugs
// in at one place. memcluster, the in-memory database of engines for the cluster's unit tests,
// is a concrete store too, which no other package of the store tree imports either (the opener
// aside): an engine on a memory store keeps running its runs itself, it does not turn leasing
// on. Tests may import any store: `go list` lists the imports of the packages' non-test files.
func TestImportBoundaries(t *testing.T) {
	const (
		storePkg  = module + "/engine/internal/store"
		opener    = storePkg + "/storeopen"
		suite     = storePkg + "/storetest"
		testOnly  = storePkg + "/memcluster"
		scheduler = module + "/engine/internal/schedule"
	)
	var concrete []string // every package of the store tree but the interfaces, the suite and the opener
	for _, p := range goList(t, storePkg+"/...") {
		if p != storePkg && p != opener && p != suite {
			concrete = append(concrete, p)
		}
	}
	if len(concrete) < 2 {
		t.Fatalf("found the concrete stores %v; want memstore and sqlite at least", concrete)
	}
	if !slices.Contains(concrete, testOnly) {
		t.Errorf("found the concrete stores %v; want %s among them", concrete, testOnly)
	}

	importers := 0
	for _, line := range goList(t, "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/engine/...", module+"/capi") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], module+"/") {
			continue
		}
		pkg, imports := fields[0], fields[1:]
		if slices.Contains(imports, testOnly) && pkg != opener {
			t.Errorf("%s imports %s, a store for tests; only tests (and %s) may", pkg, testOnly, opener)
		}
		if pkg == storePkg || strings.HasPrefix(pkg, storePkg+"/") && pkg != opener {
			continue // the store tree itself: checked below
		}
		for _, imp := range imports {
			if !slices.Contains(concrete, imp) {
				continue
			}
			if pkg != opener {
				t.Errorf("%s imports the concrete store %s; reach stores through the store interfaces, and open them in %s", pkg, imp, opener)
			} else {
				importers++
			}
		}
	}
	if importers == 0 {
		t.Errorf("%s imports no concrete store: the check above saw nothing", opener)
	}

	for _, p := range append([]string{storePkg}, concrete...) {
		deps := goList(t, "-deps", p)
		if slices.Contains(deps, scheduler) {
			t.Errorf("the store %s imports %s (directly or not); stores keep the fire history with store.Fire", p, scheduler)
		}
		if slices.Contains(deps, module+"/engine") {
			t.Errorf("the store %s imports the engine facade", p)
		}
	}
}

// The public vocabulary lives in leaf packages (engine/run: a run's record; engine/flowtype:
// the rest, following River's rivertype): they import the standard library and each other only,
// never an internal package nor the facade, so the internal packages can import them and define
// nothing that callers outside engine/ have to name.
func TestPublicLeavesImportNoInternalPackage(t *testing.T) {
	leaves := []string{module + "/engine/run", module + "/engine/flowtype"}
	for _, leaf := range leaves {
		deps := goList(t, "-deps", leaf)
		if !slices.Contains(deps, leaf) {
			t.Fatalf("go list -deps %s did not list the package itself: %v", leaf, deps)
		}
		for _, d := range deps {
			if (d == module || strings.HasPrefix(d, module+"/")) && !slices.Contains(leaves, d) {
				t.Errorf("the public leaf %s imports %s (directly or not); a leaf imports only the standard library and the other leaves %v", leaf, d, leaves)
			}
		}
	}
	// The internal packages use the public definitions: the ones that hold the vocabulary's
	// implementations import the leaf (a type defined again inside would not need it).
	for _, user := range []string{"clock", "tools", "exec", "store", "schedule", "problem"} {
		pkg := module + "/engine/internal/" + user
		imports := goList(t, "-f", `{{join .Imports "\n"}}`, pkg)
		if !slices.Contains(imports, module+"/engine/flowtype") {
			t.Errorf("%s does not import engine/flowtype; it should alias the public types, not define its own", pkg)
		}
	}
}

// Packages with one job stay below the facade and beside each other: the catalog knows nothing of
// runs (the executor, the tool router), the dry run's caller nothing of the catalog, the cluster
// services (engine/internal/cluster) nothing of the catalog nor of a concrete store, the service
// life cycle (startstop) nothing but the clock; the retention loop, the metrics feed and server,
// the event hub and the kept unsaved ends nothing of the executor or the tools; the trees of runs
// and the tool check nothing of the catalog, the scheduler or the store opener; the resource gate
// (resgate) nothing of the catalog, the schedules, the cluster services nor of a concrete store; and none imports the engine facade.
func TestImportBoundariesOfTheParts(t *testing.T) {
	const internal = module + "/engine/internal/"
	for pkg, forbidden := range map[string][]string{
		internal + "catalog":     {module + "/engine", internal + "exec", internal + "tools"},
		internal + "exec/dryrun": {module + "/engine", internal + "catalog"},
		internal + "cluster": {module + "/engine", internal + "catalog", internal + "schedule", internal + "store/postgres",
			internal + "store/sqlite", internal + "store/storeopen"},
		internal + "runtree":   {module + "/engine", internal + "catalog", internal + "schedule", internal + "store/storeopen"},
		internal + "toolcheck": {module + "/engine", internal + "catalog", internal + "cluster", internal + "schedule", internal + "store/storeopen"},
		internal + "unsaved":   {module + "/engine", internal + "exec", internal + "tools", internal + "store/storeopen"},
		internal + "startstop": {module + "/engine", internal + "exec", internal + "store", internal + "tools"},
		internal + "eventhub":  {module + "/engine", internal + "exec", internal + "store", internal + "tools"},
		internal + "metrics":   {module + "/engine", internal + "exec", internal + "store", internal + "tools", internal + "schedule"},
		internal + "retention": {module + "/engine", internal + "exec", internal + "tools", internal + "store/storeopen"},
		internal + "resgate": {module + "/engine", internal + "catalog", internal + "schedule", internal + "cluster",
			internal + "store/postgres", internal + "store/sqlite", internal + "store/storeopen"},
	} {
		deps := goList(t, "-deps", pkg)
		if !slices.Contains(deps, pkg) {
			t.Errorf("go list -deps %s does not list the package, so this check sees nothing", pkg)
		}
		for _, f := range forbidden {
			if slices.Contains(deps, f) {
				t.Errorf("%s imports %s (directly or not)", pkg, f)
			}
		}
	}
}
