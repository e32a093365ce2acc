package main

import (
	"context"

	"github.com/dcc-flow/dcc-flow/engine"
)

type lineageRequest struct {
	Path  string `json:"path"`
	Depth int    `json:"depth"`
}

// opFileLineage: {"path", "depth"?} → {"lineage": node}: how the file at path came to be
// (engine.Lineage; docs/guide/assets.md, "Lineage"); depth 0 or absent = engine.DefaultLineageDepth.
var opFileLineage = withEngine(func(e *engine.Engine, req *lineageRequest) (any, error) {
	if req.Path == "" {
		return nil, &badRequest{msg: `invalid request: "path" is required`}
	}
	n, err := e.Lineage(context.Background(), req.Path, req.Depth)
	if err != nil {
		return nil, err
	}
	return map[string]any{"lineage": n}, nil
})

type staleRequest struct {
	Paths []string `json:"paths"`
}

// opFilesStale: {"paths"?} → {"stale": [{path, reason, run_id, step_key, attempt}…]}: the
// recorded outputs under paths (files or directories; none = all) that are stale (engine.Stale).
var opFilesStale = withEngine(func(e *engine.Engine, req *staleRequest) (any, error) {
	out, err := e.Stale(context.Background(), req.Paths)
	if err != nil {
		return nil, err
	}
	return map[string]any{"stale": out}, nil
})

// opCacheList: {"key"?, "tool"?, "workflow"?, "run_id"?, "before"?, "limit"?} → {"entries":
// [entry…]}: the content cache's entries matching the filter, newest first (engine.CacheEntries).
var opCacheList = withEngine(func(e *engine.Engine, req *engine.CacheFilter) (any, error) {
	out, err := e.CacheEntries(context.Background(), *req)
	if err != nil {
		return nil, err
	}
	return map[string]any{"entries": out}, nil
})

// opCachePurge: the filter of dccflow_cache_list → {"purged": n} (engine.PurgeCache).
var opCachePurge = withEngine(func(e *engine.Engine, req *engine.CacheFilter) (any, error) {
	n, err := e.PurgeCache(context.Background(), *req)
	if err != nil {
		return nil, err
	}
	return map[string]int{"purged": n}, nil
})
