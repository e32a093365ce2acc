package remote

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Result is the outcome of one remote tool call. A call that reached the tool and succeeded
// has IsError false and an Output; every failure — the tool's own error, a JSON-RPC error, a
// broken connection, a timeout, a cancellation — has IsError true, a Kind and a Message.
type Result struct {
	// Output is the tool's result as a JSON value (nil, bool, string, json.Number,
	// []any, map[string]any): its structuredContent when present; else its text content
	// (text blocks joined with "\n") parsed as JSON when it parses; else {"text": "…"},
	// plus "content": [...] holding any non-text blocks (images, resources) as JSON. A tool
	// error keeps its Output too; a failure before or outside the tool has a nil Output.
	Output any
	// IsError reports a failed call.
	IsError bool
	// Kind is the error kind (run.KindTimeout, run.KindTransient, …, or any string the tool
	// put in a "kind" field) when IsError is true, and "" otherwise.
	Kind string
	// Message says what went wrong, for humans; "" when IsError is false.
	Message string
	// Trace is the string field "trace" of an error's structuredContent (a dcc-flow worker puts
	// the tool's Python traceback there), or "".
	Trace string
	// Worker names the pool worker that ran the call; nil for a remote that is not a pool
	// (Config.pooled) or a call that never reached a worker.
	Worker *WorkerRef
	// Logs are the lines the call wrote, as a dcc-flow worker reports them (docs/guide/pools.md
	// "Output"): with its result, or read from the files of a worker that died during the call.
	// Their Attempt is 0. LogsDropped counts the lines the worker did not keep.
	Logs        []run.LogLine
	LogsDropped int
	// Files are the files the call said it read and wrote, as a dcc-flow worker reports them
	// (FilesMetaKey; docs/guide/pools.md "Files and environment"), a failed call's too; nil when
	// it said none. Env is the environment of the worker's process (EnvMetaKey: its --init's
	// dcc_flow.set_environment), a JSON object, or nil.
	Files []flowtype.FileUse
	Env   json.RawMessage
}

// WorkerRef names one worker of a pool: a process, or a member of a pool of servers.
type WorkerRef struct {
	Pool string // the remote's name
	PID  int    // a process's; 0 for a server
	URL  string // a server's (Config.URLs); "" for a process
}

// String is "POOL/PID", or "POOL/URL" for a server, as step records store it.
func (w *WorkerRef) String() string {
	if w == nil {
		return ""
	}
	if w.URL != "" {
		return w.Pool + "/" + w.URL
	}
	return fmt.Sprintf("%s/%d", w.Pool, w.PID)
}

// resultFromTool converts a tools/call result. For a result with isError set, the kind is the
// string field "kind" of the structuredContent, or of the text parsed as a JSON object, and
// defaults to "error"; the message is the "message" field found the same way, else the text.
func resultFromTool(res *mcp.CallToolResult) Result {
	var texts []string
	var others []any
	for _, c := range res.Content {
		if tc, ok := mcp.AsTextContent(c); ok {
			texts = append(texts, tc.Text)
			continue
		}
		if v, err := toJSONValue(c); err == nil {
			others = append(others, v)
		}
	}
	text := strings.Join(texts, "\n")

	var structured any
	hasStructured := false
	if raw := bytes.TrimSpace(res.RawStructuredContent); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if v, err := decodeJSON(raw); err == nil {
			structured, hasStructured = v, true
		}
	} else if res.StructuredContent != nil {
		if v, err := toJSONValue(res.StructuredContent); err == nil && v != nil {
			structured, hasStructured = v, true
		}
	}
	var parsed any
	textIsJSON := false
	if strings.TrimSpace(text) != "" {
		if v, err := decodeJSON([]byte(text)); err == nil {
			parsed, textIsJSON = v, true
		}
	}

	var r Result
	r.Logs, r.LogsDropped = logsFromMeta(res.Meta)
	switch {
	case hasStructured:
		r.Output = structured
	case textIsJSON && len(others) == 0:
		r.Output = parsed
	default:
		obj := map[string]any{"text": text}
		if len(others) > 0 {
			obj["content"] = others
		}
		r.Output = obj
	}
	files, env, err := filesFromMeta(res.Meta)
	if err != nil {
		// The worker's answer is broken: what the call read and wrote is unknown, so the
		// attempt fails rather than be recorded (or cached) without its files.
		msg := "the worker's answer is not a valid dcc-flow tool result: " + err.Error()
		if res.IsError {
			msg += "; the tool failed too: " + firstNonEmpty(stringField(structured, "kind"), run.KindError) + ": " +
				firstNonEmpty(stringField(structured, "message"), strings.TrimSpace(text))
		}
		r.Output, r.IsError, r.Kind, r.Message = nil, true, run.KindInvalidOutput, msg
		return r
	}
	r.Files, r.Env = files, env
	if !res.IsError {
		return r
	}

	r.IsError = true
	r.Kind = firstNonEmpty(stringField(structured, "kind"), stringField(parsed, "kind"), run.KindError)
	r.Message = firstNonEmpty(stringField(structured, "message"), stringField(parsed, "message"),
		strings.TrimSpace(text), "the remote tool reported an error without a message")
	if obj, ok := structured.(map[string]any); ok {
		r.Trace, _ = obj["trace"].(string) // kept as written: a traceback's indentation matters
	}
	return r
}

// decodeJSON decodes exactly one JSON value, keeping numbers as json.Number.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// toJSONValue round-trips v through JSON into the generic representation.
func toJSONValue(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeJSON(data)
}

// stringField returns v[name] when v is a JSON object whose field name is a string.
func stringField(v any, name string) string {
	obj, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	s, _ := obj[name].(string)
	return strings.TrimSpace(s)
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}

// DisplayURL is a server's URL as step records, messages and pool listings show it: without
// the password of its user part, and with the value of every query parameter replaced by
// "xxxxx" (a pool member's URL may carry a token either way). An unparsable URL shows as
// "(an unparsable URL)".
func DisplayURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"xxxxx"}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// redactIn returns text with the secrets of raw (its password, its query values) replaced as
// DisplayURL replaces them: an error of the HTTP client may quote the URL it failed to reach.
func redactIn(text, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return strings.ReplaceAll(text, raw, "(an unparsable URL)")
	}
	text = strings.ReplaceAll(text, raw, DisplayURL(raw))
	if pw, ok := u.User.Password(); ok && pw != "" {
		text = strings.ReplaceAll(text, pw, "xxxxx")
	}
	for _, vs := range u.Query() {
		for _, v := range vs {
			if len(v) >= 4 { // a short value (a flag, "1") would blank unrelated text
				text = strings.ReplaceAll(text, v, "xxxxx")
			}
		}
	}
	return text
}
