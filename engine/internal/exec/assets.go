package exec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/filehash"
	"github.com/dcc-flow/dcc-flow/engine/internal/lineage"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/template"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// The files of a tool step's attempts and its content cache (docs/guide/assets.md): the step's
// declared reads are expanded and stat'ed before each call; when the attempt ends, they, its
// declared writes and the files its tool reported are hashed (through hashCache, the stat
// cache) and recorded with the attempt. A step with `cache` looks for a completed attempt with
// the same key whose files still hold their recorded hashes before it calls its tool, and
// leaves an entry for later runs when it completes with every file known.

// DefaultMaxFilesPerStep is the most files one attempt records when Limits.MaxFilesPerStep is 0.
const DefaultMaxFilesPerStep = filehash.DefaultMaxFiles

// MaxFilesPerStepCeiling is the largest Limits.MaxFilesPerStep a config may set.
const MaxFilesPerStepCeiling = 10_000_000

// stepFiles is what an attempt of a tool step knows of its files before its call.
type stepFiles struct {
	reads  []string                 // the declared reads, expanded and cleaned
	before map[string]filehash.Info // their stat before the call (those that exist)
	// patterns are the declared reads that are globs, absolute (filehash.AbsPattern): recorded
	// with the attempt (store.FilePattern), so that staleness sees a file that matches one
	// later and did not then.
	patterns []string
}

// renderPaths renders the templates of a step's reads or writes.
func renderPaths(ts []*template.Template, f *frame) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, template.Stringify(t.Render(f.resolve)))
	}
	return out
}

// maxFiles is the executor's limit of files per attempt.
func (r *runner) maxFiles() int {
	if n := r.x.cfg.Limits.MaxFilesPerStep; n > 0 {
		return n
	}
	return DefaultMaxFilesPerStep
}

// filesError is the failure of a step whose files could not be listed: past
// Limits.MaxFilesPerStep (kind limit_exceeded), or a glob that does not parse.
func (r *runner) filesError(sp *stepPlan, field string, err error) stepEnd {
	var le *filehash.LimitError
	if errors.As(err, &le) {
		return stepEnd{status: run.StepFailed, errKind: KindLimitExceeded, errMsg: fmt.Sprintf("step %q: %v", sp.st.ID, err)}
	}
	return stepEnd{status: run.StepFailed, errKind: run.KindError, errMsg: fmt.Sprintf("step %q: %s: %v", sp.st.ID, field, err)}
}

// expandBase is the base filehash.Expand is given for patterns: the working directory ("") when
// one is relative, else the first (any absolute base will do then, and the working directory
// costs os.Getwd two stats on each expansion: a cached step's lookup makes one).
func expandBase(patterns []string) string {
	for _, p := range patterns {
		if !filepath.IsAbs(p) {
			return ""
		}
	}
	if len(patterns) == 0 {
		return ""
	}
	return patterns[0]
}

// declaredReads expands the step's reads (globs) before a call and stats what they name.
func (r *runner) declaredReads(sp *stepPlan, f *frame) (stepFiles, error) {
	var sf stepFiles
	if len(sp.reads) == 0 {
		return sf, nil
	}
	pats := renderPaths(sp.reads, f)
	paths, err := filehash.Expand(expandBase(pats), pats, r.maxFiles())
	if err != nil {
		return sf, err
	}
	sf.reads = paths
	for _, p := range pats {
		if filehash.HasGlob(p) {
			if abs, err := filehash.AbsPattern(expandBase(pats), p); err == nil { // Expand took it
				sf.patterns = append(sf.patterns, abs)
			}
		}
	}
	sf.before = make(map[string]filehash.Info, len(paths))
	for _, p := range paths {
		if info, err := filehash.Stat(p); err == nil {
			sf.before[p] = info
		}
	}
	return sf, nil
}

// fileUse is one file of an attempt, before hashing.
type fileUse struct {
	role store.FileRole
	path string
}

// attemptFiles hashes the files of an attempt that ended: the declared reads (sf), the
// declared writes (expanded now: they exist once the tool wrote them) and the files the tool
// reported (res.Files), each (role, path) once. A declared read whose stat moved since before
// the call is unstable. The error is a *filehash.LimitError past Limits.MaxFilesPerStep.
func (r *runner) attemptFiles(ctx context.Context, in *inst, sf stepFiles, res tools.Result) ([]store.FileRecord, error) {
	sp, f := in.sp, in.f
	if len(sf.reads) == 0 && len(sf.patterns) == 0 && len(sp.writes) == 0 && len(res.Files) == 0 {
		return nil, nil
	}
	limit := r.maxFiles()
	var uses []fileUse
	seen := map[fileUse]bool{}
	add := func(role store.FileRole, p string) error {
		u := fileUse{role, p}
		if seen[u] {
			return nil
		}
		if len(uses) >= limit {
			return &filehash.LimitError{Limit: limit, Pattern: p}
		}
		seen[u] = true
		uses = append(uses, u)
		return nil
	}
	for _, p := range sf.reads {
		if err := add(store.FileRead, p); err != nil {
			return nil, err
		}
	}
	if len(sp.writes) > 0 {
		pats := renderPaths(sp.writes, f)
		writes, err := filehash.Expand(expandBase(pats), pats, limit)
		if err != nil {
			return nil, err
		}
		for _, p := range writes {
			if err := add(store.FileWrite, p); err != nil {
				return nil, err
			}
		}
	}
	for _, u := range res.Files {
		p, err := filehash.Clean(u.Path)
		if err != nil {
			continue // an empty path: nothing to record
		}
		role := store.FileRead
		if u.Role == flowtype.FileWrite {
			role = store.FileWrite
		}
		if err := add(role, p); err != nil {
			return nil, err
		}
	}
	paths := make([]string, len(uses))
	for i, u := range uses {
		paths[i] = u.path
	}
	hashed := r.x.hashes.hashAll(ctx, paths, nil, nil)
	now := r.now()
	recs := make([]store.FileRecord, len(uses))
	for i, u := range uses {
		h := hashed[i]
		if b, ok := sf.before[u.path]; ok && u.role == store.FileRead && h.State == filehash.StateOK && !b.Same(h.Info) {
			h.State, h.Hash = filehash.StateUnstable, ""
			h.Err = fmt.Sprintf("%s changed while the step ran (its size or modification time moved): a step's inputs must not change under it", u.path)
		}
		recs[i] = fileRecord(r.id, in.row.Key, in.att.Attempt, u.role, h, now)
	}
	for _, p := range sf.patterns {
		recs = append(recs, store.FileRecord{RunID: r.id, StepKey: in.row.Key, Attempt: in.att.Attempt, Role: store.FilePattern,
			Path: p, State: store.FileOK, RecordedAt: now})
	}
	return recs, nil
}

// withoutPatterns is recs without its pattern records (store.FilePattern): the files.
func withoutPatterns(recs []store.FileRecord) []store.FileRecord {
	for i, f := range recs {
		if f.Role == store.FilePattern {
			out := slices.Clone(recs[:i])
			for _, f := range recs[i+1:] {
				if f.Role != store.FilePattern {
					out = append(out, f)
				}
			}
			return out
		}
	}
	return recs
}

// fileRecord is the store record of a hash.
func fileRecord(runID, stepKey string, attempt int, role store.FileRole, h filehash.Result, now time.Time) store.FileRecord {
	rec := store.FileRecord{RunID: runID, StepKey: stepKey, Attempt: attempt, Role: role, Path: h.Path,
		State: store.FileState(h.State), Size: h.Size, Dev: h.Dev, Ino: h.Ino, Hash: h.Hash, Error: h.Err, RecordedAt: now}
	if h.ModTime != 0 {
		rec.ModTime = h.Modified()
	}
	if h.State == filehash.StateOK && h.ReadAt > 0 {
		rec.VerifiedAt = time.Unix(0, h.ReadAt).UTC() // when the hash was read: what makes the record racy or not
	}
	return rec
}

// cacheParts are what a step's cache key is made of (store.CacheEntry.Parts).
type cacheParts struct {
	Tool    string   `json:"tool"`
	Version string   `json:"version,omitempty"`
	Args    any      `json:"args"`
	Env     any      `json:"env,omitempty"`
	Key     any      `json:"key,omitempty"`
	Reads   []string `json:"reads,omitempty"` // the declared reads as expanded: a new file matching a glob changes the key
}

// cacheKey returns the key of a step's call and its parts as JSON.
func (r *runner) cacheKey(sp *stepPlan, f *frame, args map[string]any, sf stepFiles) (string, json.RawMessage, error) {
	c := sp.st.Policy.Cache
	p := cacheParts{Tool: attemptTool(sp), Version: c.Version, Args: args, Reads: sf.reads}
	if len(r.x.cfg.Env) > 0 {
		var env any
		if err := json.Unmarshal(r.x.cfg.Env, &env); err == nil {
			p.Env = env
		}
	}
	if sp.cacheKey != nil {
		p.Key = sp.cacheKey.render(f.resolve)
	}
	m := map[string]any{}
	b, err := json.Marshal(p)
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		return "", nil, err
	}
	canon, err := spec.CanonicalValue(m)
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), canon, nil
}

// cacheFrom is the detail of a cache hit's step_exit: where the output came from.
type cacheFrom struct {
	Cached bool `json:"cached"`
	Cache  struct {
		Key     string `json:"key"`
		RunID   string `json:"run_id"`
		StepKey string `json:"step_key"`
		Attempt int    `json:"attempt"`
	} `json:"cache"`
}

// cacheLookup finds a usable entry of key: the newest whose read files still have their hashes
// and whose written files still exist with theirs. miss says why none is usable. sf is the
// step's declared reads, stat'ed just before: those stats stand for the entry's inputs'.
func (r *runner) cacheLookup(ctx context.Context, sp *stepPlan, stepKey, key string, parts json.RawMessage, sf stepFiles) (hit *store.CacheEntry, miss string, err error) {
	a, ok := r.x.cfg.Store.(store.Assets)
	if !ok {
		return nil, "the store keeps no cache", nil
	}
	entries, err := a.CacheEntries(ctx, key, r.now())
	if err != nil {
		return nil, "", err
	}
	if len(entries) == 0 {
		return nil, r.cacheMissWithoutEntry(ctx, a, sp, stepKey, parts), nil
	}
	for i := range entries {
		e := &entries[i]
		if why := r.cacheStale(ctx, a, e, sf.before); why != "" {
			if miss == "" {
				miss = why // the newest entry's reason
			}
			continue
		}
		return e, "", nil
	}
	return nil, miss, nil
}

// cacheStale says why entry e can no longer stand in for a call ("" when it can): its files
// (e.Files, as CacheEntries read them) are checked against what is on disk now, reading only
// those whose stat moved or whose record is racy (the stat cache); stats holds stats just
// taken, by path. A racy record that a read found unchanged, RacyWindow or more after the file's
// modification time, is confirmed in the store (lineage.Confirmation; r.confirm: at the run's
// end), so that the lookups of other processes trust its stat from then on.
func (r *runner) cacheStale(ctx context.Context, a store.Assets, e *store.CacheEntry, stats map[string]filehash.Info) string {
	files := e.Files
	paths := make([]string, len(files))
	known := make([]*filehash.Result, len(files))
	recorded := make([]filehash.Result, len(files))
	for i, f := range files {
		paths[i] = f.Path
		recorded[i] = lineage.Recorded(f)
		known[i] = &recorded[i]
	}
	now := r.x.hashes.hashAll(ctx, paths, known, stats)
	var confirmed []store.FileRecord
	for i, f := range files {
		if c, ok := lineage.Confirmation(f, now[i]); ok {
			confirmed = append(confirmed, c)
		}
	}
	r.confirm(a, confirmed)
	for i, f := range files {
		cur := now[i]
		switch {
		case f.Role == store.FileRead && cur.State != filehash.StateOK:
			return "input " + string(cur.State) + ": " + f.Path
		case f.Role == store.FileRead && cur.Hash != f.Hash:
			return "input changed: " + f.Path
		case cur.State == filehash.StateMissing:
			return "output missing: " + f.Path
		case cur.State != filehash.StateOK:
			return "output " + string(cur.State) + ": " + f.Path
		case cur.Hash != f.Hash:
			return "output changed: " + f.Path
		}
	}
	return ""
}

// confirmBatch is how many confirmations a run holds before it stores them (else at its end).
const confirmBatch = 1000

// confirm queues the confirmations recs (lineage.Confirmation) of store a: they are stored in
// one write when the run ends (flushConfirms), or by the lookup that brings the queue to
// confirmBatch — not one write per lookup, which cost a cached foreach item more than the read
// it spares.
func (r *runner) confirm(a store.Assets, recs []store.FileRecord) {
	if len(recs) == 0 {
		return
	}
	r.confirmMu.Lock()
	r.confirms = append(r.confirms, recs...)
	var now []store.FileRecord
	if len(r.confirms) >= confirmBatch {
		now, r.confirms = r.confirms, nil
	}
	r.confirmMu.Unlock()
	if now != nil {
		// Best effort: a store that cannot keep them has the files read again next time.
		_, _ = a.ConfirmFiles(context.WithoutCancel(r.ctx), now)
	}
}

// flushConfirms stores the confirmations the run's lookups queued (confirm), best effort.
func (r *runner) flushConfirms() {
	r.confirmMu.Lock()
	now := r.confirms
	r.confirms = nil
	r.confirmMu.Unlock()
	if a, ok := r.x.cfg.Store.(store.Assets); ok && len(now) > 0 {
		_, _ = a.ConfirmFiles(context.WithoutCancel(r.ctx), now)
	}
}

// maxMissParts bounds the parts of a key a miss's step_enter carries: past it (arguments or
// declared reads by the thousand) the detail says only how large they were.
const maxMissParts = 16 << 10

// cacheMissDetail is the detail of a miss's step_enter: {"cache": {"hit": false, "key",
// "reason", "parts"}}, the parts of the key being what `dcc-flow cache explain` shows of a
// step that left no entry to read them from (its call failed, or one of its files was not
// hashed); "parts_bytes" instead when they are larger than maxMissParts.
func cacheMissDetail(key, reason string, parts json.RawMessage) json.RawMessage {
	c := map[string]any{"hit": false, "key": key, "reason": reason}
	if len(parts) <= maxMissParts {
		c["parts"] = parts
	} else {
		c["parts_bytes"] = len(parts)
	}
	b, _ := json.Marshal(map[string]any{"cache": c})
	return b
}

// cacheMissWithoutEntry says why no entry has the key: the newest entry of the same tool and
// step shows which part of the key changed.
// The entries are read once per run and step id (the first miss of a foreach's items reads
// them for all of them), before the run wrote entries of its own; the newest of the same step
// instance (the same foreach item) is preferred, else the newest of the step.
func (r *runner) cacheMissWithoutEntry(ctx context.Context, a store.Assets, sp *stepPlan, key string, parts json.RawMessage) string {
	type prior struct {
		once    sync.Once
		entries []store.CacheEntry
	}
	v, _ := r.priorEntries.LoadOrStore(sp.st.ID, &prior{})
	p := v.(*prior)
	p.once.Do(func() {
		prev, err := a.ListCache(ctx, store.CacheFilter{Tool: attemptTool(sp), Workflow: r.name, Limit: 200})
		if err != nil {
			return
		}
		for _, e := range prev {
			if e.StepID == sp.st.ID && e.RunID != r.id {
				p.entries = append(p.entries, e)
			}
		}
	})
	var entry *store.CacheEntry
	for i := range p.entries {
		if p.entries[i].StepKey == key {
			entry = &p.entries[i]
			break
		}
		if entry == nil {
			entry = &p.entries[i]
		}
	}
	if entry == nil {
		return "no earlier run with this key"
	}
	changed := partsChanged(entry.Parts, parts)
	if changed == "declared inputs changed" && entry.StepKey == key {
		if why := readsChanged(entry.Parts, parts); why != "" {
			return why + " (declared inputs changed since run " + entry.RunID + ")"
		}
	}
	return "no earlier run with this key (" + changed + " since run " + entry.RunID + ")"
}

// readsChanged says how the declared reads of two Parts documents differ: "input added: PATH"
// (a new file matches a glob), else "input removed: PATH", with how many more when several
// were; "" when neither is so (the same paths).
func readsChanged(was, now json.RawMessage) string {
	var a, b struct {
		Reads []string `json:"reads"`
	}
	if json.Unmarshal(was, &a) != nil || json.Unmarshal(now, &b) != nil {
		return ""
	}
	diff := func(x, y []string) []string { // in x, not in y
		in := make(map[string]bool, len(y))
		for _, p := range y {
			in[p] = true
		}
		var out []string
		for _, p := range x {
			if !in[p] {
				out = append(out, p)
			}
		}
		return out
	}
	say := func(what string, paths []string) string {
		s := what + ": " + paths[0]
		if len(paths) > 1 {
			s += fmt.Sprintf(" and %d more", len(paths)-1)
		}
		return s
	}
	if added := diff(b.Reads, a.Reads); len(added) > 0 {
		return say("input added", added)
	}
	if removed := diff(a.Reads, b.Reads); len(removed) > 0 {
		return say("input removed", removed)
	}
	return ""
}

// partsChanged names the parts of a cache key that differ between two Parts documents.
func partsChanged(was, now json.RawMessage) string {
	var a, b map[string]json.RawMessage
	if json.Unmarshal(was, &a) != nil || json.Unmarshal(now, &b) != nil {
		return "the key changed"
	}
	names := map[string]string{"tool": "tool", "version": "version", "args": "arguments", "env": "environment", "key": "extra key", "reads": "declared inputs"}
	var changed []string
	for k, name := range names {
		if string(a[k]) != string(b[k]) {
			changed = append(changed, name)
		}
	}
	sort.Strings(changed)
	if len(changed) == 0 {
		return "the key changed"
	}
	s := changed[0]
	for _, c := range changed[1:] {
		s += ", " + c
	}
	return s + " changed"
}

// cacheEntry is the entry a completed attempt leaves, nil when one of its files is not known
// (missing input, unreadable, unstable: nothing could check it later).
func (r *runner) cacheEntry(sp *stepPlan, in *inst, key string, parts json.RawMessage, end stepEnd, files []store.FileRecord) *store.CacheEntry {
	for _, f := range files {
		if f.State != store.FileOK {
			return nil
		}
	}
	now := r.now()
	e := &store.CacheEntry{Key: key, Tool: attemptTool(sp), StepID: sp.st.ID, Workflow: r.name, RunID: r.id, StepKey: in.row.Key,
		Attempt: in.att.Attempt, Parts: parts, Output: end.outputJSON, FileRefs: end.refsJSON, CreatedAt: now}
	if ttl := sp.st.Policy.Cache.TTLSecs; ttl > 0 {
		e.ExpiresAt = now.Add(time.Duration(ttl) * time.Second)
	}
	return e
}
