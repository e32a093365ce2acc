package ui

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Bounds of the file routes (docs/guide/ui.md, "Files").
const (
	maxLineageDepth = 100 // ?depth= of GET /api/lineage
	maxStalePaths   = 100 // ?path= given to GET /api/stale at once
)

// lineage answers GET /api/lineage?path=P&depth=N: how the file at P came to be
// (engine.LineageNode: the attempt that wrote it, the files it read, recursively, each with its
// state now). 400 invalid_input without a path or with a depth that is not 1 to
// maxLineageDepth; 404 not_found for a path no recorded attempt read or wrote.
func (h *handler) lineage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := q.Get("path")
	if strings.TrimSpace(p) == "" {
		writeError(w, http.StatusBadRequest, run.CodeInvalidInput, "path is empty: give the file's absolute path, e.g. /api/lineage?path=%2Fshots%2Fsh010.usda")
		return
	}
	depth := 0
	if s := q.Get("depth"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLineageDepth {
			writeError(w, http.StatusBadRequest, run.CodeInvalidInput, fmt.Sprintf(
				"depth %.40q must be a whole number from 1 to %d (levels of writers; default %d)", s, maxLineageDepth, engine.DefaultLineageDepth))
			return
		}
		depth = n
	}
	n, err := h.e.Lineage(r.Context(), p, depth)
	if err != nil {
		writeEngineError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, n)
}

// stale answers GET /api/stale?path=DIR (repeatable; none: every recorded output): {"stale":
// [engine.StaleFile...]}, by path. 400 invalid_input for an empty path or more than
// maxStalePaths of them.
func (h *handler) stale(w http.ResponseWriter, r *http.Request) {
	paths := r.URL.Query()["path"]
	if len(paths) > maxStalePaths {
		writeError(w, http.StatusBadRequest, run.CodeInvalidInput, fmt.Sprintf("%d paths: give at most %d (or a directory above them)", len(paths), maxStalePaths))
		return
	}
	for _, p := range paths {
		if strings.TrimSpace(p) == "" {
			writeError(w, http.StatusBadRequest, run.CodeInvalidInput, "path is empty: give a file or directory, or no path for every recorded output")
			return
		}
	}
	out, err := h.e.Stale(r.Context(), paths)
	if err != nil {
		writeEngineError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"stale": out})
}
