package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/filehash"
	"github.com/dcc-flow/dcc-flow/engine/internal/lineage"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// LineageNode is one file of a lineage graph (Engine.Lineage): its recorded hash, what it is now,
// and the attempt that made it with the files that attempt read.
type LineageNode = lineage.Node

// Making is the attempt that wrote a file of a lineage graph.
type Making = lineage.Making

// StaleFile is a recorded output that is stale (Engine.Stale), and why.
type StaleFile = lineage.StaleFile

// DefaultLineageDepth is the depth of Engine.Lineage when it is given 0.
const DefaultLineageDepth = 10

// assets returns the store's file records, or an error saying the store keeps none.
func (e *Engine) assets() (lineage.Source, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	src, ok := e.store.(lineage.Source)
	if !ok {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: "this engine's store keeps no file records"}
	}
	return src, nil
}

// Lineage returns how the file at path came to be (docs/guide/assets.md, "Lineage"): the
// newest recorded attempt that wrote it — its run, step, tool, arguments and environment —
// and the files it read, each with its own making, depth levels deep (0: DefaultLineageDepth;
// negative is invalid). A relative path is taken from the working directory. Code not_found when
// no recorded attempt read or wrote the file.
func (e *Engine) Lineage(ctx context.Context, path string, depth int) (*LineageNode, error) {
	src, err := e.assets()
	if err != nil {
		return nil, err
	}
	if depth < 0 {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("depth must be 0 (the default, %d) or more; got %d", DefaultLineageDepth, depth)}
	}
	if depth == 0 {
		depth = DefaultLineageDepth
	}
	p, err := filehash.Clean(path)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: "lineage: " + err.Error()}
	}
	n, err := lineage.Trace(ctx, src, lineage.CheckRecorded, p, depth)
	if errors.Is(err, lineage.ErrNotRecorded) {
		return nil, &run.Error{Code: run.CodeNotFound, Message: fmt.Sprintf("no recorded attempt read or wrote %s: only the files of tool steps that declare them (reads, writes) or whose tools report them are recorded", p)}
	}
	return n, err
}

// Stale returns the recorded outputs that are stale (docs/guide/assets.md, "Staleness"): among
// the newest recorded write of every path under one of paths (files or directories; none =
// every recorded output), those modified or deleted since they were made, or made from an
// input whose content changed since or with a file a glob of their step's declared reads
// matches now and did not then, directly or through other recorded outputs. By path.
func (e *Engine) Stale(ctx context.Context, paths []string) ([]StaleFile, error) {
	src, err := e.assets()
	if err != nil {
		return nil, err
	}
	dirs := make([]string, 0, len(paths))
	for _, p := range paths {
		c, err := filehash.Clean(p)
		if err != nil {
			return nil, &run.Error{Code: run.CodeInvalidRequest, Message: "stale: " + err.Error()}
		}
		dirs = append(dirs, c)
	}
	out, err := lineage.Stale(ctx, src, lineage.CheckRecorded, dirs)
	if out == nil && err == nil {
		out = []StaleFile{}
	}
	return out, err
}

// FileInfo is one file an attempt read or wrote (AttemptInfo.Files; docs/guide/assets.md): what
// the engine learnt of it when the attempt ended.
type FileInfo struct {
	Role string `json:"role"` // "read" or "write"
	// Path is absolute and cleaned, in its OS's form (a Windows drive path or UNC share keeps
	// its form).
	Path string `json:"path"`
	// State is "ok" (hashed), "missing", "unreadable" or "unstable" (it changed while it was
	// hashed or while the step ran; never cached).
	State   string    `json:"state"`
	Size    int64     `json:"size,omitempty"`
	ModTime time.Time `json:"mtime,omitzero"`
	// Hash is "blake3:" and 64 hex digits when State is "ok".
	Hash string `json:"hash,omitempty"`
	// Error says why the file is missing, unreadable or unstable.
	Error string `json:"error,omitempty"`
}

func fileInfo(f store.FileRecord) FileInfo {
	return FileInfo{Role: string(f.Role), Path: f.Path, State: string(f.State), Size: f.Size, ModTime: f.ModTime,
		Hash: f.Hash, Error: f.Error}
}

// withFiles sets the Files of the attempts of steps (those in their AttemptHistory) from the
// store's file records; nothing when the store keeps none. The records of the attempts shown are
// read by attempt, in one query per 500 of them.
func (e *Engine) withFiles(ctx context.Context, runID string, steps []StepInfo) error {
	a, ok := e.store.(store.Assets)
	if !ok {
		return nil
	}
	var refs []store.AttemptRef
	for i := range steps {
		for _, ai := range steps[i].AttemptHistory {
			refs = append(refs, store.AttemptRef{RunID: runID, StepKey: steps[i].Key, Attempt: ai.Attempt})
		}
	}
	type at struct {
		key     string
		attempt int
	}
	by := make(map[at][]FileInfo)
	for len(refs) > 0 {
		n := min(len(refs), 500)
		recs, err := a.Files(ctx, store.FileFilter{Attempts: refs[:n]})
		if err != nil {
			return err
		}
		for _, f := range recs {
			k := at{f.StepKey, f.Attempt}
			by[k] = append(by[k], fileInfo(f))
		}
		refs = refs[n:]
	}
	if len(by) == 0 {
		return nil
	}
	for i := range steps {
		for j := range steps[i].AttemptHistory {
			ai := &steps[i].AttemptHistory[j]
			ai.Files = by[at{steps[i].Key, ai.Attempt}]
		}
	}
	return nil
}

// CacheEntry is one entry of the content cache (docs/guide/assets.md, "Caching"): a completed
// attempt that later steps with the same key may stand in for.
type CacheEntry struct {
	Key      string `json:"key"`
	Tool     string `json:"tool"`
	StepID   string `json:"step_id"`
	Workflow string `json:"workflow,omitempty"`
	RunID    string `json:"run_id"`
	StepKey  string `json:"step_key"`
	Attempt  int    `json:"attempt"`
	// Parts is what the key is made of: {"tool", "version", "args", "env", "key", "reads"}.
	Parts     json.RawMessage `json:"parts,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	ExpiresAt time.Time       `json:"expires_at,omitzero"` // zero: never
}

// CacheFilter selects cache entries; its zero value selects every one.
type CacheFilter struct {
	Key      string `json:"key,omitempty"`
	Tool     string `json:"tool,omitempty"`
	Workflow string `json:"workflow,omitempty"`
	RunID    string `json:"run_id,omitempty"`
	// Before selects the entries created before it; zero = any.
	Before time.Time `json:"before,omitzero"`
	// Limit is the most entries CacheEntries returns; ≤ 0 = all. CachePurge ignores it.
	Limit int `json:"limit,omitempty"`
}

func (f CacheFilter) store() store.CacheFilter {
	return store.CacheFilter{Key: f.Key, Tool: f.Tool, Workflow: f.Workflow, RunID: f.RunID, Before: f.Before, Limit: f.Limit}
}

// CacheEntries returns the entries of the content cache matching f, newest first, expired ones
// too (their ExpiresAt says so).
func (e *Engine) CacheEntries(ctx context.Context, f CacheFilter) ([]CacheEntry, error) {
	src, err := e.assets()
	if err != nil {
		return nil, err
	}
	if f.Limit < 0 {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("limit must be 0 (every entry) or more; got %d", f.Limit)}
	}
	list, err := src.ListCache(ctx, f.store())
	if err != nil {
		return nil, err
	}
	out := make([]CacheEntry, len(list))
	for i, c := range list {
		out[i] = CacheEntry{Key: c.Key, Tool: c.Tool, StepID: c.StepID, Workflow: c.Workflow, RunID: c.RunID, StepKey: c.StepKey,
			Attempt: c.Attempt, Parts: c.Parts, CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt}
	}
	return out, nil
}

// PurgeCache deletes the entries of the content cache matching f and returns how many: the
// steps they stood in for run again next time. It needs a writable engine.
func (e *Engine) PurgeCache(ctx context.Context, f CacheFilter) (int, error) {
	src, err := e.assets()
	if err != nil {
		return 0, err
	}
	if e.cfg.ReadOnly {
		return 0, &run.Error{Code: run.CodeReadOnly, Message: "the engine is read-only: purge the cache from the engine that owns the database, or stop it"}
	}
	return src.PurgeCache(ctx, f.store())
}
