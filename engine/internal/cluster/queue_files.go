package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/filehash"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The files a queued call read and wrote and the environment it ran in (flowtype.ToolResult's
// Files and Env; docs/guide/assets.md) cross the queue with its outcome (store.CallOutcome's
// Files and Env), a success's and a failure's alike, so that the orchestrating engine hashes and
// records them with the attempt — and leaves a cache entry with the call's writes — as for a
// call it ran itself (docs/operations/cluster.md, "The tool-call queue").

// The bounds of the files one queued call's outcome carries (each role and path once, as this
// engine cleaned them): those of a Python tool's reports (dcc_flow's MAX_FILES_PER_CALL and
// MAX_FILES_BYTES: docs/reference/limits.md), so that any call a Python host or pool worker
// answers fits. Past either, the files within them go with a failure of kind limit_exceeded (a
// tool's own failure keeps its error): carrying part of them with a success would record, and
// cache, the attempt without the others.
const (
	// MaxQueuedFiles is the most files: 100,000.
	MaxQueuedFiles = 100_000
	// MaxQueuedFilePathBytes is the most bytes of their paths together (UTF-8): 16 MiB.
	MaxQueuedFilePathBytes = 16 << 20
)

// maxQueuedEnvBytes bounds the env a queued call carries: 64 KiB, as a host's calls_complete and
// a pool worker's answer are bounded (dcc_flow.set_environment refuses a larger one). A larger
// env, or one that is not a JSON object, is not carried (the attempt records the engine's own).
const maxQueuedEnvBytes = 64 << 10

// EnvCaller is a Caller whose engine has an environment of its own (engine.Config.Env). A queued
// call whose tool's side reported no env carries it instead, so that the orchestrator records
// the environment of the engine that ran the call, not its own. A Caller without it carries
// none then (the orchestrator records its own, as for a local call).
type EnvCaller interface {
	// Env returns the engine's environment, a JSON object; nil for none.
	Env() json.RawMessage
}

// carryFiles sets the files and env of out, the outcome of a call this engine ran, from res:
// each path made absolute against this engine's current directory (filehash.Clean: a relative
// path names a file of the process that ran the call, not of the orchestrator's), a path that
// cannot be cleaned (empty, a NUL byte) left out as the executor leaves it out, any role but
// "write" read as "read", each (role, path) once in the order first said, within MaxQueuedFiles
// and MaxQueuedFilePathBytes; the env of res, else the engine's own (EnvCaller). Past a bound a
// success becomes a failure of kind limit_exceeded that names the call's tool, the engine, the
// count and the fix, with the files within the bounds.
func (cq *Queue) carryFiles(out *store.CallOutcome, res tools.Result, c *store.QueuedCall) {
	out.Env = nil
	switch {
	case validEnv(res.Env):
		out.Env = res.Env
	default:
		if ec, ok := cq.caller.(EnvCaller); ok && validEnv(ec.Env()) {
			out.Env = ec.Env()
		}
	}
	out.Files = nil
	if len(res.Files) == 0 {
		return
	}
	files := make([]flowtype.FileUse, 0, min(len(res.Files), cq.maxFiles))
	seen := make(map[flowtype.FileUse]bool, min(len(res.Files), cq.maxFiles))
	size, over := 0, 0
	for _, f := range res.Files {
		p, err := filehash.Clean(f.Path)
		if err != nil {
			continue
		}
		u := flowtype.FileUse{Path: p, Role: flowtype.FileRead}
		if f.Role == flowtype.FileWrite {
			u.Role = flowtype.FileWrite
		}
		switch {
		case seen[u]:
		case over > 0 || len(files) >= cq.maxFiles || size+len(p) > cq.maxFilePathBytes:
			over++
		default:
			seen[u] = true
			files = append(files, u)
			size += len(p)
		}
	}
	if len(files) > 0 {
		out.Files, _ = marshalFiles(files) // strings only: cannot fail
	}
	if over > 0 && out.ErrorKind == "" {
		what := "tool " + c.Tool
		if c.Remote != "" {
			what = "remote " + c.Remote + " tool " + c.Tool
		}
		out.Output = nil
		out.ErrorKind = exec.KindLimitExceeded
		out.ErrorMessage = fmt.Sprintf("the call of %s on engine %s reported %d files (reads and writes), over what crosses the tool-call "+
			"queue: at most %d files and %s of paths; the first %d were kept and the call fails, as a step recorded with part of its "+
			"files would make its lineage and its cache wrong. Split the work over more steps (a foreach), or report the folder a tool writes into",
			what, cq.m.ID(), len(files)+over, cq.maxFiles, byteSize(cq.maxFilePathBytes), len(files))
	}
}

// byteSize is n bytes in MiB when it is whole MiB, else in bytes.
func byteSize(n int) string {
	if n > 0 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// marshalFiles is the JSON of files, without HTML escaping (a path's & < > stay as they are).
func marshalFiles(files []flowtype.FileUse) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(files); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// validEnv reports whether env is an env a queued call carries: a JSON object of at most
// maxQueuedEnvBytes.
func validEnv(env json.RawMessage) bool {
	env = bytes.TrimSpace(env)
	return len(env) > 0 && len(env) <= maxQueuedEnvBytes && env[0] == '{' && json.Valid(env)
}

// resultFiles sets the files and env of res, the result of queued call id as the orchestrator
// reads it back, from out. Files that are not a JSON list of {"path", "role"} (a row edited by
// hand: an engine writes a valid one) fail a successful call with kind invalid_output, as a
// pool worker's broken list does, rather than record (and cache) it without its files; an env
// that is not a JSON object is none.
func resultFiles(res *tools.Result, out store.CallOutcome, id int64) {
	if validEnv(out.Env) {
		res.Env = out.Env
	}
	if len(out.Files) == 0 {
		return
	}
	var files []flowtype.FileUse
	if err := json.Unmarshal(out.Files, &files); err != nil {
		if res.Error == nil {
			res.OutputJSON = nil
			res.Error = &tools.ToolError{Kind: run.KindInvalidOutput,
				Message: fmt.Sprintf("the files of queued call %d are not a JSON list of {\"path\", \"role\"} objects: %v", id, err)}
		}
		return
	}
	if len(files) > 0 {
		res.Files = files
	}
}
