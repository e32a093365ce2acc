package run_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// TestSharedRulesRetryableByDefault checks the default retry rule against the golden table the
// Python package also reads (testdata/golden/shared_rules.json; engine/spec's TestSharedRules
// -update writes it): every row without a retry_on list is this package's rule.
func TestSharedRulesRetryableByDefault(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", "shared_rules.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Retryable []struct {
			Kind      string    `json:"kind"`
			RetryOn   *[]string `json:"retry_on"`
			Retryable bool      `json:"retryable"`
		} `json:"retryable"`
	}
	if err := json.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, c := range rules.Retryable {
		if c.RetryOn != nil {
			continue
		}
		seen[c.Kind] = true
		if got := run.RetryableByDefault(c.Kind); got != c.Retryable {
			t.Errorf("retryable[%d] kind %q: RetryableByDefault gives %v, the table %v", i, c.Kind, got, c.Retryable)
		}
	}
	// Every Kind constant of errors.go (and the empty kind) has a row, so a new kind cannot
	// skip the Python side.
	kinds := []string{""}
	file, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(name.Name, "Kind") {
					value, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					kinds = append(kinds, value)
				}
			}
		}
	}
	if len(kinds) < 12 {
		t.Fatalf("found only %d Kind constants in errors.go: %q", len(kinds)-1, kinds)
	}
	for _, k := range kinds {
		if !seen[k] {
			t.Errorf("kind %q has no row with retry_on null in the golden table", k)
		}
	}
}
