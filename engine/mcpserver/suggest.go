package mcpserver

import (
	"bytes"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
)

// mcp-go answers a tools/call of a tool the server does not have with the JSON-RPC error -32602
// "tool 'NAME' not found: tool not found", and offers no way to change that message. The
// transports' writers (ServeStdio's, the HTTP handler's) pass every answer through
// suggestUnknownTool, which appends the closest tool name, as the engine does for fields and
// tools ("; did you mean 'workflows_run'?"), and the tools this server has. The code and the
// original words stay, so a client that matches on them still does.

// toolNotFoundRe matches mcp-go's message inside the JSON text of an answer. Names outside the
// characters of a tool name are left as they are (they would need JSON escaping here).
var toolNotFoundRe = regexp.MustCompile(`tool '([A-Za-z0-9_.\-]{1,128})' not found: tool not found`)

var toolNotFoundTail = []byte("' not found: tool not found")

// suggestUnknownTool returns p with every unknown-tool message completed, or nil when p has none
// (the common case costs one bytes.Contains).
func (s *Server) suggestUnknownTool(p []byte) []byte {
	if !bytes.Contains(p, toolNotFoundTail) {
		return nil
	}
	var names []string
	for name := range s.mcp.ListTools() {
		names = append(names, name)
	}
	slices.Sort(names)
	return toolNotFoundRe.ReplaceAllFunc(p, func(m []byte) []byte {
		name := string(toolNotFoundRe.FindSubmatch(m)[1])
		out := append([]byte{}, m...)
		if sug := yamltext.Suggest(name, names); sug != "" {
			out = append(out, "; did you mean '"+sug+"'? This server's tools: "...)
		} else {
			out = append(out, "; this server's tools: "...)
		}
		return append(out, strings.Join(names, ", ")...)
	})
}

// suggestWriter is an io.Writer (stdio) whose writes go through suggestUnknownTool. mcp-go
// writes each answer in one Write; an answer split across writes is passed on unchanged.
type suggestWriter struct {
	w   interface{ Write([]byte) (int, error) }
	fix func([]byte) []byte
}

func (w *suggestWriter) Write(p []byte) (int, error) {
	if q := w.fix(p); q != nil {
		if _, err := w.w.Write(q); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return w.w.Write(p)
}

// suggestResponseWriter is suggestWriter for an HTTP answer (a JSON body or SSE events). It
// flushes as the writer it wraps does, and Unwrap lets http.ResponseController reach that
// writer (mcp-go sets write deadlines through it).
type suggestResponseWriter struct {
	http.ResponseWriter
	fix func([]byte) []byte
}

func (w *suggestResponseWriter) Write(p []byte) (int, error) {
	if q := w.fix(p); q != nil {
		if _, err := w.ResponseWriter.Write(q); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

func (w *suggestResponseWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *suggestResponseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
