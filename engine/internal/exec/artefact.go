package exec

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// ArtefactURIPrefix starts the URI of an artefact held by the engine's artefact store.
const ArtefactURIPrefix = "artefact://sha256/"

// captureFileRefs captures the file_refs of a tool output (docs/reference/spec.md, "Artefacts"): each entry
// {path | uri | inline_b64, mime?} becomes {uri, path?, mime?, size?, sha256?}. Inline data is
// decoded and stored content-addressed (uri artefact://sha256/<hex>); a readable path is hashed
// and gets a file:// uri unless it has one; a bare uri is kept. An entry that cannot be
// captured keeps what it had plus an "error" string: capture never fails the step, whose tool
// has already done its work. Outputs without a file_refs array give nil.
func (r *runner) captureFileRefs(output any) ([]any, json.RawMessage) {
	m, ok := output.(map[string]any)
	if !ok {
		return nil, nil
	}
	raw, ok := m["file_refs"].([]any)
	if !ok {
		return nil, nil
	}
	refs := make([]any, 0, len(raw))
	for i, e := range raw {
		refs = append(refs, r.captureRef(i, e))
	}
	b, err := json.Marshal(refs)
	if err != nil {
		return nil, nil
	}
	return refs, b
}

func (r *runner) captureRef(i int, e any) map[string]any {
	ref, ok := e.(map[string]any)
	if !ok {
		return map[string]any{"error": fmt.Sprintf("file_refs[%d] is not an object", i)}
	}
	out := map[string]any{}
	for _, k := range []string{"path", "uri", "mime", "name"} {
		if v, ok := ref[k].(string); ok && v != "" {
			out[k] = v
		}
	}
	if b64, ok := ref["inline_b64"].(string); ok {
		data, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			out["error"] = fmt.Sprintf("file_refs[%d].inline_b64 is not valid base64: %v", i, err)
			return out
		}
		sum, err := r.x.cfg.Store.PutArtefact(context.Background(), data)
		if err != nil {
			out["error"] = fmt.Sprintf("storing file_refs[%d]: %v", i, err)
			return out
		}
		out["uri"], out["sha256"], out["size"] = ArtefactURIPrefix+sum, sum, float64(len(data))
		return out
	}
	if p, ok := out["path"].(string); ok {
		size, sum, err := hashFile(p)
		if err != nil {
			out["error"] = fmt.Sprintf("file_refs[%d].path: %v", i, err)
		} else {
			out["size"], out["sha256"] = float64(size), sum
		}
		if _, has := out["uri"]; !has {
			out["uri"] = fileURI(p)
		}
		return out
	}
	if _, has := out["uri"]; !has {
		out["error"] = fmt.Sprintf("file_refs[%d] needs one of path, uri or inline_b64", i)
	}
	return out
}

func hashFile(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

func fileURI(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	p = filepath.ToSlash(p)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // C:/x → /C:/x
	}
	return (&url.URL{Scheme: "file", Path: p}).String()
}
