package remote

import (
	"encoding/json"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The _meta keys of a tools/call result under which a dcc-flow worker returns the lines the call
// printed (python/dcc_flow/_worker.py): OutputMetaKey holds a list of {"stream", "text"} objects
// (a plain string is read as a stdout line), OutputDroppedMetaKey how many more lines the worker
// did not keep.
const (
	OutputMetaKey        = "dcc-flow/output"
	OutputDroppedMetaKey = "dcc-flow/output-dropped"
)

// logsFromMeta reads the output lines of a tools/call result's _meta; a result without them, or
// with entries of another shape, gives none (a server other than a dcc-flow worker). Whatever the
// worker sent, it keeps the newest run.MaxStepLogLines lines, each cut to run.MaxLogLineBytes
// (as an in-process tool's lines are), counting the others as dropped; the step record then
// keeps the newest within run.MaxStepLogBytes.
func logsFromMeta(meta *mcp.Meta) ([]run.LogLine, int) {
	lines, dropped := logsFromMetaAll(meta)
	if over := len(lines) - run.MaxStepLogLines; over > 0 {
		lines = lines[over:]
		dropped += over
	}
	for i := range lines {
		lines[i].Text = run.Clip(lines[i].Text, run.MaxLogLineBytes)
	}
	return lines, dropped
}

func logsFromMetaAll(meta *mcp.Meta) ([]run.LogLine, int) {
	if meta == nil || meta.AdditionalFields == nil {
		return nil, 0
	}
	var lines []run.LogLine
	entries, _ := meta.AdditionalFields[OutputMetaKey].([]any)
	for _, e := range entries {
		switch v := e.(type) {
		case string:
			lines = append(lines, run.LogLine{Stream: run.StreamStdout, Text: v})
		case map[string]any:
			text, ok := v["text"].(string)
			if !ok {
				continue
			}
			stream, _ := v["stream"].(string)
			if stream != run.StreamStderr {
				stream = run.StreamStdout
			}
			lines = append(lines, run.LogLine{Stream: stream, Text: text})
		}
	}
	dropped := 0
	switch n := meta.AdditionalFields[OutputDroppedMetaKey].(type) {
	case float64:
		if n > 0 && n < 1e15 {
			dropped = int(n)
		}
	case json.Number:
		i, _ := n.Int64()
		dropped = int(min(max(i, 0), 1e15))
	}
	return lines, dropped
}

// logsFromText splits output a process wrote (a file's tail) into lines of stream, each cut to
// run.MaxLogLineBytes, dropping a trailing empty line.
func logsFromText(stream, text string) []run.LogLine {
	text = strings.TrimSuffix(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	if text == "" {
		return nil
	}
	parts := strings.Split(text, "\n")
	out := make([]run.LogLine, len(parts))
	for i, p := range parts {
		out[i] = run.LogLine{Stream: stream, Text: run.Clip(p, run.MaxLogLineBytes)}
	}
	return out
}
