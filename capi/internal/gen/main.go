// Command gen writes the files of the C ABI from its one table (table.go):
//
//	go run ./capi/internal/gen [-root DIR]
//
// `make generate` and `go generate ./capi/...` run it (the directive is in capi/doc.go). DIR is
// the repository root (default: the current directory); the files are those of outputs, each
// written only when its content changes. TestGeneratedFilesAreCurrent fails when one is stale.
package main

import (
	"bytes"
	"embed"
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"text/template"
)

// output is one generated file.
type output struct {
	path     string // slash-separated, from the repository root
	template string // in templates
	gofmt    bool   // Go source: gofmt the result
}

var outputs = []output{
	{path: "capi/exports_gen.go", template: "exports_gen.go.tmpl", gofmt: true},
	{path: "capi/cabi_exports_gen.go", template: "cabi_exports_gen.go.tmpl", gofmt: true},
	{path: "capi/dccflow.h", template: "dccflow.h.tmpl"},
	{path: "python/dcc_flow/_ffi_table.py", template: "_ffi_table.py.tmpl"},
}

//go:embed *.tmpl
var templates embed.FS

// data is what the templates see.
type data struct {
	ABIVersion    int
	HeaderDoc     []string
	Groups        []group
	Exports       []export
	CtypesImports string
}

// render is the content of o generated from the table.
func render(o output) ([]byte, error) {
	t, err := template.ParseFS(templates, o.template)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	d := data{ABIVersion: abiVersion, HeaderDoc: headerDoc, Groups: groups, Exports: allExports(), CtypesImports: ctypesImports()}
	if err := t.Execute(&b, d); err != nil {
		return nil, fmt.Errorf("%s: %w", o.template, err)
	}
	if !o.gofmt {
		return b.Bytes(), nil
	}
	src, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%s: the generated Go is not valid: %w\n%s", o.path, err, b.Bytes())
	}
	return src, nil
}

func main() {
	root := flag.String("root", ".", "the repository root")
	flag.Parse()
	if err := checkTable(); err != nil {
		fmt.Fprintln(os.Stderr, "gen: capi/internal/gen/table.go:", err)
		os.Exit(1)
	}
	for _, o := range outputs {
		src, err := render(o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		path := filepath.Join(*root, filepath.FromSlash(o.path))
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, src) {
			continue // unchanged: keep its modification time, so make rebuilds nothing
		}
		if err := os.WriteFile(path, src, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		fmt.Println("gen: wrote", o.path)
	}
}
