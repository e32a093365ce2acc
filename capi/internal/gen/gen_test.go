package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository root, from this package's folder (where go test runs).
const root = "../../.."

// TestGeneratedFilesAreCurrent regenerates every output in memory and compares it with the file
// in the tree: a file edited by hand, or a table changed without `make generate`, fails here.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	if err := checkTable(); err != nil {
		t.Fatalf("capi/internal/gen/table.go: %v", err)
	}
	for _, o := range outputs {
		want, err := render(o)
		if err != nil {
			t.Fatalf("%s: %v", o.path, err)
		}
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(o.path)))
		if err != nil {
			t.Errorf("%s: %v; run `make generate` (go generate ./capi/...) to write it", o.path, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what capi/internal/gen/table.go generates (%s); change the table, not the file, "+
				"and run `make generate` (go generate ./capi/...)", o.path, firstDifference(got, want))
		}
	}
}

// firstDifference names the first line where the file (got) and the table's output (want) differ.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		if i >= len(g) || i >= len(w) || g[i] != w[i] {
			return fmt.Sprintf("line %d: the file has %s, the table gives %s", i+1, quoteLine(g, i), quoteLine(w, i))
		}
	}
	return "they differ"
}

func quoteLine(lines []string, i int) string {
	if i >= len(lines) {
		return "nothing (the end of the file)"
	}
	return fmt.Sprintf("%q", lines[i])
}

// TestCheckTableRefuses: a table the scripts could not read is refused before anything is written.
func TestCheckTableRefuses(t *testing.T) {
	saved := groups
	t.Cleanup(func() { groups = saved })
	for _, tc := range []struct {
		name   string
		groups []group
		want   string
	}{
		{"digit", []group{{Exports: []export{jsonExport("dccflow_run2")}}}, "lower case words"},
		{"prefix", []group{{Exports: []export{jsonExport("dcc_run")}}}, "lower case words"},
		{"twice", []group{{Exports: []export{jsonExport("dccflow_run_dry")}}, {Exports: []export{jsonExport("dccflow_run_dry")}}}, "listed twice"},
		{"no body", []group{{Exports: []export{{Name: "dccflow_x", Ret: cVoid}}}}, "no Body"},
		{"empty group", []group{{Comment: []string{"nothing"}}}, "no export"},
	} {
		groups = tc.groups
		if err := checkTable(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: checkTable() = %v, want an error about %q", tc.name, err, tc.want)
		}
	}
	groups = saved
	if err := checkTable(); err != nil {
		t.Fatalf("the table: %v", err)
	}
}

// TestJSONExportOp: a JSON export's wrapper calls the op named after it.
func TestJSONExportOp(t *testing.T) {
	e := jsonExport("dccflow_schedules_validate")
	if e.Body != "call(h, in, out, opSchedulesValidate)" || !e.JSON {
		t.Fatalf("%+v", e)
	}
	if got, want := e.CDecl(), "int32_t dccflow_schedules_validate(uint64_t handle, const char *in_json, char **out_json)"; got != want {
		t.Fatalf("CDecl = %q, want %q", got, want)
	}
	if got, want := e.Ctypes(), "([c_uint64, c_char_p, POINTER(c_void_p)], c_int32)"; got != want {
		t.Fatalf("Ctypes = %q, want %q", got, want)
	}
}
