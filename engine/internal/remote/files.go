package remote

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

// The _meta keys of a tools/call result under which a dcc-flow worker returns the files the call
// said it read and wrote and the environment of its process (python/dcc_flow/_worker.py,
// docs/guide/pools.md "Files and environment"): FilesMetaKey holds a list of {"path", "role"}
// objects (role "read" or "write"), EnvMetaKey a JSON object (dcc_flow.set_environment in the
// worker's --init).
const (
	FilesMetaKey = "dcc-flow/files"
	EnvMetaKey   = "dcc-flow/env"
)

// MaxEnvBytes bounds the environment a worker reports, as JSON (64 KiB, as dcc_flow.set_environment
// and the C ABI's calls_complete bound it).
const MaxEnvBytes = 64 << 10

// filesFromMeta reads the files and the environment of a tools/call result's _meta; a result
// without them gives none (a server other than a dcc-flow worker). Present but of another shape
// — files that are not a list of objects with a non-empty string "path" and a "role" of "read" or
// "write", an env that is not an object or is over MaxEnvBytes — is an error: the worker is
// broken, and its files cannot be trusted. Other keys of a file's object are ignored (a newer
// worker may say more). The env is re-encoded as JSON (object keys sorted).
func filesFromMeta(meta *mcp.Meta) ([]flowtype.FileUse, json.RawMessage, error) {
	if meta == nil || meta.AdditionalFields == nil {
		return nil, nil, nil
	}
	var files []flowtype.FileUse
	if raw, ok := meta.AdditionalFields[FilesMetaKey]; ok && raw != nil {
		entries, ok := raw.([]any)
		if !ok {
			return nil, nil, fmt.Errorf("_meta[%q] is %s, not a list of {\"path\", \"role\"} objects", FilesMetaKey, jsonType(raw))
		}
		files = make([]flowtype.FileUse, 0, len(entries))
		for i, e := range entries {
			obj, ok := e.(map[string]any)
			if !ok {
				return nil, nil, fmt.Errorf("_meta[%q][%d] is %s, not a {\"path\", \"role\"} object", FilesMetaKey, i, jsonType(e))
			}
			path, _ := obj["path"].(string)
			if path == "" {
				return nil, nil, fmt.Errorf("_meta[%q][%d].path is %s; it must be a non-empty string", FilesMetaKey, i, jsonType(obj["path"]))
			}
			role, _ := obj["role"].(string)
			if role != flowtype.FileRead && role != flowtype.FileWrite {
				return nil, nil, fmt.Errorf(`_meta[%q][%d].role is %s; it must be "read" or "write"`, FilesMetaKey, i, jsonType(obj["role"]))
			}
			files = append(files, flowtype.FileUse{Path: path, Role: role})
		}
		if len(files) == 0 {
			files = nil
		}
	}
	var env json.RawMessage
	if raw, ok := meta.AdditionalFields[EnvMetaKey]; ok && raw != nil {
		obj, ok := raw.(map[string]any)
		if !ok {
			return nil, nil, fmt.Errorf("_meta[%q] is %s, not a JSON object", EnvMetaKey, jsonType(raw))
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(obj); err != nil {
			return nil, nil, fmt.Errorf("_meta[%q]: %v", EnvMetaKey, err)
		}
		env = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if len(env) > MaxEnvBytes {
			return nil, nil, fmt.Errorf("_meta[%q] is %d bytes of JSON; at most %d (64 KiB)", EnvMetaKey, len(env), MaxEnvBytes)
		}
	}
	return files, env, nil
}

// jsonType names the JSON type of a decoded value, quoting a short string.
func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "missing or null"
	case string:
		if len(x) <= 40 {
			return fmt.Sprintf("the string %q", x)
		}
		return "a string"
	case bool:
		return "a boolean"
	case float64, json.Number:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("a %T", v)
	}
}
