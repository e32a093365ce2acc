package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/dcc-flow/dcc-flow/engine/internal/filehash"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/mcpserver"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// assetSpec is a two-step chain whose files the spec declares: import reads DIR/src.abc and
// writes DIR/mid.usda; render reads DIR/mid.usda and writes DIR/out.exr.
func assetSpec(dir string) string {
	return fmt.Sprintf(`
name: assets
steps:
  - {id: import, tool: flow__echo, args: {value: 1}, reads: [%[1]q], writes: [%[2]q]}
  - {id: render, tool: flow__echo, args: {value: 2}, reads: [%[2]q], writes: [%[3]q]}
`, filepath.Join(dir, "src.abc"), filepath.Join(dir, "mid.usda"), filepath.Join(dir, "out.exr"))
}

// assetEngine runs assetSpec once over files it writes in a new directory and returns the
// engine, the directory and the run id.
func assetEngine(t *testing.T) (*engine.Engine, string, string) {
	t.Helper()
	ctx := context.Background()
	// Resolved: the engine records cleaned absolute paths (macOS's /var is a symbolic link).
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"src.abc": "alembic", "mid.usda": "#usda 1.0", "out.exr": "pixels"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e, err := engine.Open(ctx, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	sp, err := spec.ParseString(assetSpec(dir))
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Submit(ctx, engine.StartRequest{Spec: sp})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %v %+v", err, info)
	}
	return e, dir, id
}

var blake3Re = regexp.MustCompile(`blake3:[0-9a-f]{64}`)

// TestAssetResourcesGolden reads the lineage and stale resources with raw JSON-RPC and compares
// each request/response pair with testdata/assets.golden (-update rewrites it): the templates,
// a lineage whole and cut by depth, the stale outputs after an input changed, and the errors.
func TestAssetResourcesGolden(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the golden file holds the POSIX form of the paths; TestAssetResourcesOverTransports reads the same resources on Windows")
	}
	t.Parallel()
	ctx := context.Background()
	e, dir, id := assetEngine(t)
	srv := mcpserver.New(e).MCPServer()
	enc := uriComponent
	var out bytes.Buffer
	norm := func(b []byte) []byte {
		b = bytes.ReplaceAll(b, []byte(enc(dir)), []byte("<dir>"))
		b = bytes.ReplaceAll(b, []byte(dir), []byte("<dir>"))
		b = bytes.ReplaceAll(b, []byte(id), []byte("<run-id>"))
		return blake3Re.ReplaceAll(normalize(b), []byte("blake3:<hash>"))
	}
	exchange := func(title, req string) {
		t.Helper()
		resp := srv.HandleMessage(ctx, json.RawMessage(req))
		raw, err := json.MarshalIndent(resp, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		// The resource's text is JSON: shown indented, so the golden file can be read.
		var m struct {
			Result struct {
				Contents []map[string]any `json:"contents"`
			} `json:"result"`
		}
		if json.Unmarshal(raw, &m) == nil && len(m.Result.Contents) == 1 {
			text, _ := m.Result.Contents[0]["text"].(string)
			var v any
			if json.Unmarshal([]byte(text), &v) == nil {
				pretty, _ := json.MarshalIndent(v, "    ", "  ")
				raw = append(raw, []byte("\n   text: "+string(pretty))...)
			}
		}
		var req2 bytes.Buffer
		_ = json.Indent(&req2, []byte(req), "", "  ")
		out.WriteString("## " + title + "\n-> " + string(norm(req2.Bytes())) + "\n<- " + string(norm(raw)) + "\n\n")
	}
	read := func(n int, uri string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"resources/read","params":{"uri":%q}}`, n, uri)
	}
	exchange("initialize", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"golden","version":"1"}}}`)
	exchange("resources/templates/list", `{"jsonrpc":"2.0","id":2,"method":"resources/templates/list"}`)
	exchange("resources/list", `{"jsonrpc":"2.0","id":3,"method":"resources/list"}`)
	out.WriteString("# the recorded files are all as they were made\n\n")
	exchange("lineage of the render's output (two levels of writers)", read(4, "dccflow://lineage/"+enc(filepath.Join(dir, "out.exr"))))
	exchange("lineage cut at depth 1 (mid.usda has a writer: cut)", read(5, "dccflow://lineage/"+enc(filepath.Join(dir, "out.exr"))+"?depth=1"))
	exchange("lineage of a source (read, never written: no made)", read(6, "dccflow://lineage/"+enc(filepath.Join(dir, "src.abc"))))
	exchange("stale: nothing", read(7, "dccflow://stale"))

	out.WriteString("# src.abc changed, out.exr deleted\n\n")
	if err := os.WriteFile(filepath.Join(dir, "src.abc"), []byte("alembic, edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "out.exr")); err != nil {
		t.Fatal(err)
	}
	exchange("lineage: the output missing, its input's input changed", read(8, "dccflow://lineage/"+enc(filepath.Join(dir, "out.exr"))))
	exchange("stale: every output, by path", read(9, "dccflow://stale"))
	exchange("stale under a directory", read(10, "dccflow://stale/"+enc(dir)))
	exchange("stale of one file", read(11, "dccflow://stale/"+enc(filepath.Join(dir, "mid.usda"))))
	exchange("stale under a directory with no outputs: none", read(12, "dccflow://stale/"+enc(filepath.Join(dir, "elsewhere"))))

	out.WriteString("# errors: JSON-RPC -32603 (mcp-go's code for every resource handler error), the engine's code first in the message\n\n")
	exchange("lineage of a file no attempt recorded: not_found", read(20, "dccflow://lineage/"+enc(filepath.Join(dir, "nope.usd"))))
	exchange("lineage with a bad depth: invalid_request", read(21, "dccflow://lineage/"+enc(filepath.Join(dir, "out.exr"))+"?depth=0"))
	exchange("lineage without a path: invalid_request", read(22, "dccflow://lineage/"))
	exchange("lineage of a path not encoded as one segment: mcp-go finds no resource (-32002)", read(23, "dccflow://lineage/"+filepath.Join(dir, "out.exr")))
	exchange("stale of a relative path that has no recorded output: none", read(24, "dccflow://stale/"+enc("no/such/dir")))

	golden := filepath.Join("testdata", "assets.golden")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, out.Bytes()) {
		t.Fatalf("asset resources differ from %s (rerun with -update if the change is intended):\n%s", golden, out.String())
	}
}

// TestAssetResourcesOverTransports reads a lineage and the stale outputs through a client over
// stdio and HTTP, and an unrecorded path's error: the engine's code and message.
func TestAssetResourcesOverTransports(t *testing.T) {
	t.Parallel()
	e, dir, id := assetEngine(t)
	sp, _ := spec.ParseString(gated)
	if err := e.Register(sp); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"stdio", "http"} {
		t.Run(kind, func(t *testing.T) {
			b := setupOn(t, kind, e)
			outPath := filepath.Join(dir, "out.exr")
			doc, err := readResource(t, b, "dccflow://lineage/"+uriComponent(outPath))
			if err != nil {
				t.Fatal(err)
			}
			made, _ := doc["made"].(map[string]any)
			if doc["path"] != outPath || doc["now"] != "unchanged" || made == nil || made["run_id"] != id || made["step_key"] != "render" ||
				made["tool"] != "flow__echo" || len(made["inputs"].([]any)) != 1 {
				t.Fatalf("lineage: %v", doc)
			}
			in := made["inputs"].([]any)[0].(map[string]any)
			if in["path"] != filepath.Join(dir, "mid.usda") || in["made"].(map[string]any)["step_key"] != "import" {
				t.Fatalf("lineage input: %v", in)
			}
			if doc, err := readResource(t, b, "dccflow://stale/"+uriComponent(dir)); err != nil || len(doc["stale"].([]any)) != 0 {
				t.Fatalf("stale: %v %v", doc, err)
			}
			tpls, err := b.c.ListResourceTemplates(context.Background(), mcp.ListResourceTemplatesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tpl := range tpls.ResourceTemplates {
				names = append(names, tpl.URITemplate.Raw())
			}
			if got := strings.Join(names, " "); !strings.Contains(got, "dccflow://lineage/{path}{?depth}") || !strings.Contains(got, "dccflow://stale/{path}") {
				t.Fatalf("resource templates: %v", names)
			}
			nope := filepath.Join(dir, "nope.usd")
			_, err = readResource(t, b, "dccflow://lineage/"+uriComponent(nope))
			if err == nil || !strings.Contains(err.Error(), "not_found: no recorded attempt read or wrote "+nope) {
				t.Fatalf("an unrecorded path: %v", err)
			}
		})
	}
}

// TestAssetResourceErrors: what a bad URI or a closed engine answers.
func TestAssetResourceErrors(t *testing.T) {
	t.Parallel()
	e, dir, _ := assetEngine(t)
	srv := mcpserver.New(e).MCPServer()
	for _, tc := range []struct{ uri, want string }{
		{"dccflow://lineage/" + uriComponent(dir+"/out.exr") + "?depth=101", `must be a whole number from 1 to 100 (levels of writers; default 10)`},
		{"dccflow://lineage/" + uriComponent(dir+"/out.exr") + "?depth=x", `invalid_request: depth \"x\"`},
		{"dccflow://lineage/" + uriComponent(dir+"/out.exr") + "?depth=-1", `invalid_request: depth \"-1\"`},
		{"dccflow://lineage/a%00b", "invalid_request: lineage: "},
		{"dccflow://stale/", "invalid_request: no path"},
		{"dccflow://stale/a%00b", "invalid_request: stale: "},
	} {
		resp := srv.HandleMessage(context.Background(), json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":%q}}`, tc.uri)))
		b, _ := json.Marshal(resp)
		if !strings.Contains(string(b), `"code":-32603`) || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %s; want -32603 and %q", tc.uri, b, tc.want)
		}
	}
	e.Close(context.Background())
	resp := srv.HandleMessage(context.Background(), json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"dccflow://stale"}}`))
	if b, _ := json.Marshal(resp); !strings.Contains(string(b), `"message":"closed: `) {
		t.Errorf("a closed engine: %s", b)
	}
}

// TestRedteamAssetResourceURIs: hostile URIs of the asset resources are JSON-RPC errors (or an
// empty answer), never a crash, and a path no attempt recorded says only that.
func TestRedteamAssetResourceURIs(t *testing.T) {
	t.Parallel()
	e, _, _ := assetEngine(t)
	srv := mcpserver.New(e).MCPServer()
	long := uriComponent("/" + strings.Repeat("a", 100_000))
	shadow, _ := json.Marshal("not_found: no recorded attempt read or wrote " + cleaned(t, "/etc/shadow")) // Z:\etc\shadow under Wine
	for _, tc := range []struct{ uri, want string }{
		{"dccflow://lineage/%2Fetc%2Fshadow", `"message":` + strings.TrimSuffix(string(shadow), `"`)},
		{"dccflow://lineage/" + long, `"message":"not_found: `},
		{"dccflow://lineage/%2Fa?depth=99999999999999999999999", `"message":"invalid_request: depth`},
		{"dccflow://lineage/%2Fa?depth=1&depth=2", `"code":-3200`}, // one depth: a second matches no template
		{"dccflow://lineage/%ZZ", `"code":-32002`},
		{"dccflow://lineage/%FF%FE", `"message":"not_found: `}, // not UTF-8: a name no attempt recorded
		{"dccflow://stale/%2F", `"result":{"contents":[{"uri":"dccflow://stale/%2F","mimeType":"application/json","text":"{\"stale\":[`},
		{"dccflow://stale/" + long, `"text":"{\"stale\":[]}"`},
		{"dccflow://stale/%2Fa/b", `"code":-32002`},
	} {
		resp := srv.HandleMessage(context.Background(), json.RawMessage(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":%q}}`, tc.uri)))
		b, _ := json.Marshal(resp)
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("%.80s: %.400s; want %s", tc.uri, b, tc.want)
		}
	}
}

// uriComponent percent-encodes p as one segment of a resource URI, as JavaScript's
// encodeURIComponent does (docs/reference/mcp.md): "/" and ":" too (a Windows drive path's).
func uriComponent(p string) string {
	return strings.ReplaceAll(url.PathEscape(p), ":", "%3A")
}

// cleaned is path as the engine names it (filehash.Clean): on Windows, with a drive and backslashes.
func cleaned(t *testing.T, path string) string {
	t.Helper()
	c, err := filehash.Clean(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
