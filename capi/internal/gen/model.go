package main

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// group is a run of exports of capi/dccflow.h, after a blank line and its comment.
type group struct {
	Comment []string // the comment before the group, one entry a line; none when empty
	Exports []export
}

// export is one exported C function.
type export struct {
	Name   string
	Ret    ctype
	Params []param // none: (void)
	// Body is the Go expression the //export wrapper returns (the statement it runs when Ret is
	// cVoid), in terms of the Go names of Params: hand-written code of capi does the work.
	Body string
	// Doc is the Go doc comment of the wrapper, one entry a line; docs/reference/c-abi/README.md documents every
	// export's request and answer in full.
	Doc []string
	// JSON marks the exports of the JSON shape (jsonParams, int32_t), which the tests call by name.
	JSON bool
}

// param is one parameter: its name in capi/dccflow.h, its name in the Go wrapper, its type.
type param struct {
	C, Go string
	Type  ctype
}

// ctype is a C type as each of the three languages spells it.
type ctype struct {
	C      string // in capi/dccflow.h; a pointer type ends with '*'
	Cgo    string // the Go type of the wrapper; cgo declares it in libdccflow.h as the C type
	Ctypes string // the ctypes type of python/dcc_flow/_ffi_table.py, as imported there
}

var (
	cVoid    = ctype{C: "void", Ctypes: "None"}
	cInt32   = ctype{C: "int32_t", Cgo: "C.int32_t", Ctypes: "c_int32"}
	cUint32  = ctype{C: "uint32_t", Cgo: "C.uint32_t", Ctypes: "c_uint32"}
	cUint64  = ctype{C: "uint64_t", Cgo: "C.uint64_t", Ctypes: "c_uint64"}
	cJSONIn  = ctype{C: "const char *", Cgo: "*C.dccflow_cchar", Ctypes: "c_char_p"} // dccflow_cchar: see exports_gen.go.tmpl
	cCharPtr = ctype{C: "char *", Cgo: "*C.char", Ctypes: "c_void_p"}                // a string the library returned: _ffi keeps its address, to free it
	cJSONOut = ctype{C: "char **", Cgo: "**C.char", Ctypes: "POINTER(c_void_p)"}
)

// jsonParams are the parameters of every JSON export.
var jsonParams = []param{
	{C: "handle", Go: "h", Type: cUint64},
	{C: "in_json", Go: "in", Type: cJSONIn},
	{C: "out_json", Go: "out", Type: cJSONOut},
}

// jsonExport is the JSON export name, whose wrapper runs the op named after it through call
// (dccflow_spec_parse: opSpecParse), with the Go doc comment doc (one entry a line).
func jsonExport(name string, doc ...string) export {
	op := "op"
	for _, w := range strings.Split(strings.TrimPrefix(name, "dccflow_"), "_") {
		op += strings.ToUpper(w[:1]) + w[1:]
	}
	return export{Name: name, Ret: cInt32, Params: jsonParams, Body: "call(h, in, out, " + op + ")", Doc: doc, JSON: true}
}

// CDecl is the export's declaration in capi/dccflow.h, without the ';'.
func (e export) CDecl() string {
	ps := make([]string, len(e.Params))
	for i, p := range e.Params {
		ps[i] = cSpell(p.Type.C, p.C)
	}
	if len(ps) == 0 {
		ps = []string{"void"}
	}
	return cSpell(e.Ret.C, e.Name) + "(" + strings.Join(ps, ", ") + ")"
}

// cSpell is a declaration of name with C type typ: "char *p", "uint64_t handle".
func cSpell(typ, name string) string {
	if strings.HasSuffix(typ, "*") {
		return typ + name
	}
	return typ + " " + name
}

// GoSignature is the Go signature of the wrapper after `func`.
func (e export) GoSignature() string {
	ps := make([]string, len(e.Params))
	for i, p := range e.Params {
		ps[i] = p.Go + " " + p.Type.Cgo
	}
	s := e.Name + "(" + strings.Join(ps, ", ") + ")"
	if e.Ret != cVoid {
		s += " " + e.Ret.Cgo
	}
	return s
}

// GoBody is the statement of the wrapper.
func (e export) GoBody() string {
	if e.Ret == cVoid {
		return e.Body
	}
	return "return " + e.Body
}

// Ctypes is the export's entry of the ctypes table: ([argtypes], restype).
func (e export) Ctypes() string {
	ps := make([]string, len(e.Params))
	for i, p := range e.Params {
		ps[i] = p.Type.Ctypes
	}
	return "([" + strings.Join(ps, ", ") + "], " + e.Ret.Ctypes + ")"
}

// allExports is every export, in the order of the header.
func allExports() []export {
	var out []export
	for _, g := range groups {
		out = append(out, g.Exports...)
	}
	return out
}

var pyNameRe = regexp.MustCompile(`[A-Za-z_]\w*`)

// ctypesImports are the names of the ctypes module the Python table uses, sorted as isort does
// (constants, then the rest): "POINTER, c_char_p, …".
func ctypesImports() string {
	seen := map[string]bool{}
	var names []string
	for _, e := range allExports() {
		for _, n := range pyNameRe.FindAllString(e.Ctypes(), -1) {
			if n != "None" && !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	sort.Slice(names, func(i, j int) bool {
		ci, cj := names[i] == strings.ToUpper(names[i]), names[j] == strings.ToUpper(names[j])
		if ci != cj {
			return ci
		}
		return names[i] < names[j]
	})
	return strings.Join(names, ", ")
}

var nameRe = regexp.MustCompile(`^dccflow_[a-z]+(_[a-z]+)*$`)

// checkTable is nil when the table can be generated: names unique and spelled as the scripts
// that read capi/dccflow.h find them, a body for every export, and no empty group.
func checkTable() error {
	seen := map[string]bool{}
	for i, g := range groups {
		if len(g.Exports) == 0 {
			return fmt.Errorf("group %d has no export", i)
		}
		for _, e := range g.Exports {
			switch {
			case !nameRe.MatchString(e.Name):
				return fmt.Errorf("export %q: a name is dccflow_ then lower case words joined by '_'", e.Name)
			case seen[e.Name]:
				return fmt.Errorf("export %s is listed twice", e.Name)
			case e.Body == "":
				return fmt.Errorf("export %s has no Body (the Go code its wrapper calls)", e.Name)
			}
			seen[e.Name] = true
		}
	}
	return nil
}
