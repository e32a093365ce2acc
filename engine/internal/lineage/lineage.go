// Package lineage answers two questions from the file records of a store (docs/guide/assets.md):
// how a file came to be — the attempt that wrote it, its tool, arguments and environment, and
// the files it read, recursively (Trace) — and which recorded outputs are stale, because an
// input's content changed since they were made, transitively, or because they were modified or
// deleted since (Stale).
package lineage

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/filehash"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// Source is what lineage reads: the file records, the attempts and the runs.
type Source interface {
	store.Assets
	store.AttemptLog
	GetRun(ctx context.Context, id string) (store.Run, error)
}

// Checker tells what a recorded file is now: its state and hash, read again only when its
// stat moved since rec was recorded (the stat cache).
type Checker func(ctx context.Context, rec store.FileRecord) filehash.Result

// Recorded is the filehash view of a stored record: what filehash.Recheck compares a stat with.
// Its ReadAt is the record's VerifiedAt, and it is Racy by filehash.IsRacy of its modification
// time and VerifiedAt: a record whose hash was never read from the file RacyWindow or more after
// its modification time (VerifiedAt zero, or too close) has a file that may have changed again
// within the same timestamp tick, and Recheck reads it again.
func Recorded(rec store.FileRecord) filehash.Result {
	res := filehash.Result{Info: filehash.Info{Path: rec.Path, Size: rec.Size, Dev: rec.Dev, Ino: rec.Ino},
		State: filehash.State(rec.State), Hash: rec.Hash}
	if !rec.ModTime.IsZero() {
		res.ModTime = rec.ModTime.UnixNano()
	}
	if !rec.VerifiedAt.IsZero() {
		res.ReadAt = rec.VerifiedAt.UnixNano()
	}
	res.Racy = filehash.IsRacy(res.ModTime, res.ReadAt)
	return res
}

// Confirmation returns rec with VerifiedAt set to cur's read, and true, when cur — what a check
// learnt of rec's file now — is worth storing (store.Assets.ConfirmFiles): rec is ok and racy
// (Recorded), and cur read the file (ReadAt) and found rec's hash with rec's stat
// (filehash.Info.Same) RacyWindow or more after its modification time (not Racy). Then a later
// stat equal to rec's stands for its hash without a read. Else rec, false.
func Confirmation(rec store.FileRecord, cur filehash.Result) (store.FileRecord, bool) {
	was := Recorded(rec)
	if rec.State != store.FileOK || rec.Hash == "" || !was.Racy || cur.State != filehash.StateOK || cur.Hash != rec.Hash ||
		cur.ReadAt <= 0 || filehash.IsRacy(cur.ModTime, cur.ReadAt) || !cur.Info.Same(was.Info) {
		return rec, false
	}
	rec.VerifiedAt = time.Unix(0, cur.ReadAt).UTC()
	return rec, true
}

// confirmMax is how many confirmations Stale and Trace store at once.
const confirmMax = 5000

// confirm stores the confirmations recs (best effort: a read-only store, or one that fails,
// stores none, and the files are read again next time).
func confirm(ctx context.Context, src Source, recs []store.FileRecord) {
	for len(recs) > 0 && ctx.Err() == nil {
		n := min(len(recs), confirmMax)
		if _, err := src.ConfirmFiles(ctx, recs[:n]); err != nil {
			return
		}
		recs = recs[n:]
	}
}

// CheckRecorded is the Checker of the record itself: a file whose stat is the one recorded is
// trusted to hold the recorded hash without being read (filehash.Recheck, git's index).
func CheckRecorded(ctx context.Context, rec store.FileRecord) filehash.Result {
	return filehash.Recheck(ctx, rec.Path, Recorded(rec))
}

// Now is what a file is now, compared with a record of it.
type Now string

// Values of Now.
const (
	NowUnchanged  Now = "unchanged"  // the recorded hash
	NowChanged    Now = "changed"    // another hash
	NowMissing    Now = "missing"    // no file
	NowUnreadable Now = "unreadable" // a file that cannot be hashed (or was not hashed when recorded)
)

// Node is one file of a lineage graph.
type Node struct {
	Path string `json:"path"`
	// Hash is the hash the file had when the attempt that reads it (or, for the root, wrote
	// it) recorded it; "" when it was not hashed.
	Hash string `json:"hash,omitempty"`
	Now  Now    `json:"now"`
	// Made is the attempt that wrote the file; nil for a file no recorded attempt wrote (a
	// source: a vendor drop, an artist's scene).
	Made *Making `json:"made,omitempty"`
	// Cut is true when the depth limit stopped the walk: the writer of the file is not looked for.
	Cut bool `json:"cut,omitempty"`
	// Repeat is true when the file's making is drawn at an earlier node of the graph (an input
	// shared by several steps): it is not expanded again.
	Repeat bool `json:"repeat,omitempty"`
}

// Making is the attempt that wrote a file.
type Making struct {
	RunID    string          `json:"run_id"`
	Workflow string          `json:"workflow,omitempty"`
	StepKey  string          `json:"step_key"`
	Attempt  int             `json:"attempt"`
	Tool     string          `json:"tool,omitempty"`
	Status   string          `json:"status,omitempty"`
	Args     json.RawMessage `json:"args,omitempty"`
	Env      json.RawMessage `json:"env,omitempty"`
	At       time.Time       `json:"at"` // when the file was recorded
	// Hash is the hash the attempt wrote ("" when it could not hash it).
	Hash   string  `json:"hash,omitempty"`
	Inputs []*Node `json:"inputs"`
}

// ErrNotRecorded is Trace's error for a path that no recorded attempt read or wrote.
var ErrNotRecorded = errors.New("no recorded attempt read or wrote this file")

// Trace returns the lineage of path (cleaned by the caller: filehash.Clean) down to depth
// levels of writers (depth ≤ 0: 1; the root's writer is level 1). The newest recorded write
// of a path is its making.
func Trace(ctx context.Context, src Source, check Checker, path string, depth int) (*Node, error) {
	if depth <= 0 {
		depth = 1
	}
	t := &tracer{src: src, check: check, made: map[string]bool{}, runs: map[string]store.Run{}}
	defer func() { confirm(ctx, src, t.confirmed) }()
	w, err := t.newestWrite(ctx, path)
	if err != nil {
		return nil, err
	}
	root := &Node{Path: path}
	if w == nil {
		reads, err := src.Files(ctx, store.FileFilter{Path: path, Role: store.FileRead, Limit: 1})
		if err != nil {
			return nil, err
		}
		if len(reads) == 0 {
			return nil, ErrNotRecorded
		}
		root.Hash, root.Now = reads[0].Hash, t.now(ctx, reads[0])
		return root, nil
	}
	root.Hash, root.Now = w.Hash, t.now(ctx, *w)
	if err := t.expand(ctx, root, w, depth); err != nil {
		return nil, err
	}
	return root, nil
}

type tracer struct {
	src       Source
	check     Checker
	made      map[string]bool // paths whose making is drawn already
	runs      map[string]store.Run
	confirmed []store.FileRecord // the records to confirm (Confirmation)
}

// newestWrite returns the newest write record of path, nil when none.
func (t *tracer) newestWrite(ctx context.Context, path string) (*store.FileRecord, error) {
	ws, err := t.src.Files(ctx, store.FileFilter{Path: path, Role: store.FileWrite})
	if err != nil || len(ws) == 0 {
		return nil, err
	}
	w := ws[len(ws)-1] // by ID: the last recorded
	return &w, nil
}

func (t *tracer) now(ctx context.Context, rec store.FileRecord) Now {
	cur := t.check(ctx, rec)
	if c, ok := Confirmation(rec, cur); ok {
		t.confirmed = append(t.confirmed, c)
	}
	return compare(rec, cur)
}

// compare says what a file is now against its record.
func compare(rec store.FileRecord, cur filehash.Result) Now {
	switch {
	case cur.State == filehash.StateMissing:
		return NowMissing
	case cur.State != filehash.StateOK || rec.Hash == "":
		return NowUnreadable
	case cur.Hash != rec.Hash:
		return NowChanged
	}
	return NowUnchanged
}

// expand sets n.Made from write record w and follows its inputs while depth lasts.
func (t *tracer) expand(ctx context.Context, n *Node, w *store.FileRecord, depth int) error {
	t.made[n.Path] = true
	m := &Making{RunID: w.RunID, StepKey: w.StepKey, Attempt: w.Attempt, At: w.RecordedAt, Hash: w.Hash, Inputs: []*Node{}}
	if r, ok := t.runs[w.RunID]; ok {
		m.Workflow = r.Name
	} else if r, err := t.src.GetRun(ctx, w.RunID); err == nil {
		t.runs[w.RunID] = r
		m.Workflow = r.Name
	}
	atts, err := t.src.ListAttempts(ctx, w.RunID, w.StepKey)
	if err != nil {
		return err
	}
	for _, a := range atts {
		if a.Attempt == w.Attempt {
			m.Tool, m.Status, m.Args, m.Env = a.Tool, string(a.Status), a.Args, a.Env
		}
	}
	n.Made = m
	reads, err := t.src.Files(ctx, store.FileFilter{RunID: w.RunID, StepKey: w.StepKey, Attempt: w.Attempt, Role: store.FileRead})
	if err != nil {
		return err
	}
	for _, r := range reads {
		in := &Node{Path: r.Path, Hash: r.Hash, Now: t.now(ctx, r)}
		m.Inputs = append(m.Inputs, in)
		if t.made[r.Path] {
			in.Repeat = true
			continue
		}
		if depth <= 1 {
			// Only say there is more when there is.
			if ws, err := t.src.Files(ctx, store.FileFilter{Path: r.Path, Role: store.FileWrite, Limit: 1}); err == nil && len(ws) > 0 {
				in.Cut = true
			}
			continue
		}
		iw, err := t.newestWrite(ctx, r.Path)
		if err != nil {
			return err
		}
		if iw != nil {
			if err := t.expand(ctx, in, iw, depth-1); err != nil {
				return err
			}
		}
	}
	return nil
}

// StaleFile is a recorded output that is stale.
type StaleFile struct {
	Path string `json:"path"`
	// Reason says why: "modified since it was made", "deleted since it was made", "input
	// changed: PATH", "input deleted: PATH", "made from stale PATH", "input added: PATH" (a
	// file a glob of the step's declared reads matches now and did not then).
	Reason string `json:"reason"`
	// The attempt that made it.
	RunID   string `json:"run_id"`
	StepKey string `json:"step_key"`
	Attempt int    `json:"attempt"`
}

// pageSize is how many records Stale reads at once.
const pageSize = 5000

// Stale returns the stale outputs among the newest recorded write of every path under one of
// dirs (a file or a directory, cleaned by the caller; none = every recorded output), by path.
// The racy records it found unchanged by a read that was not racy are confirmed in src at its
// end (Confirmation, store.Assets.ConfirmFiles; best effort), so that the next Stale, in any
// process, trusts their stat. Trace does the same.
func Stale(ctx context.Context, src Source, check Checker, dirs []string) ([]StaleFile, error) {
	type attempt = store.AttemptRef
	latest := map[string]store.FileRecord{} // the newest write of each output path
	inputs := map[attempt][]store.FileRecord{}
	patterns := map[attempt][]string{} // the globs of the attempts' declared reads (store.FilePattern)
	addPattern := func(r store.FileRecord) {
		a := attempt{RunID: r.RunID, StepKey: r.StepKey, Attempt: r.Attempt}
		patterns[a] = append(patterns[a], r.Path)
	}
	if len(dirs) == 0 {
		// Every record at once, in id order (the table's own order: no index to sort through).
		if err := each(ctx, src, store.FileFilter{WithPatterns: true}, func(r store.FileRecord) {
			switch r.Role {
			case store.FileWrite:
				latest[r.Path] = r
			case store.FilePattern:
				addPattern(r)
			default:
				a := attempt{RunID: r.RunID, StepKey: r.StepKey, Attempt: r.Attempt}
				inputs[a] = append(inputs[a], r)
			}
		}); err != nil {
			return nil, err
		}
	} else {
		for _, d := range dirs {
			if err := each(ctx, src, store.FileFilter{Role: store.FileWrite, Under: d}, func(r store.FileRecord) { latest[r.Path] = r }); err != nil {
				return nil, err
			}
		}
		// The inputs of the attempts that made them.
		made := map[attempt]bool{}
		for _, w := range latest {
			made[attempt{RunID: w.RunID, StepKey: w.StepKey, Attempt: w.Attempt}] = true
		}
		refs := make([]attempt, 0, len(made))
		for a := range made {
			refs = append(refs, a)
		}
		for i := 0; i < len(refs); i += 500 {
			batch := refs[i:min(i+500, len(refs))]
			// Their reads and patterns in one query (their writes come too, and are passed over).
			if err := each(ctx, src, store.FileFilter{WithPatterns: true, Attempts: batch}, func(r store.FileRecord) {
				switch r.Role {
				case store.FilePattern:
					addPattern(r)
				case store.FileRead:
					a := attempt{RunID: r.RunID, StepKey: r.StepKey, Attempt: r.Attempt}
					inputs[a] = append(inputs[a], r)
				}
			}); err != nil {
				return nil, err
			}
		}
	}
	// The outputs asked about, before the upstream ones are added.
	paths := make([]string, 0, len(latest))
	for p := range latest {
		paths = append(paths, p)
	}
	if len(dirs) > 0 {
		// An input made by a recorded attempt outside dirs is stale when its own inputs
		// changed: follow the newest writes of the inputs upstream, however far.
		var pending []string
		seen := map[string]bool{}
		queue := func(recs []store.FileRecord) {
			for _, r := range recs {
				if _, out := latest[r.Path]; !out && !seen[r.Path] {
					seen[r.Path] = true
					pending = append(pending, r.Path)
				}
			}
		}
		for _, recs := range inputs {
			queue(recs)
		}
		for len(pending) > 0 {
			p := pending[len(pending)-1]
			pending = pending[:len(pending)-1]
			ws, err := src.Files(ctx, store.FileFilter{Path: p, Role: store.FileWrite})
			if err != nil {
				return nil, err
			}
			if len(ws) == 0 {
				continue // a source: no recorded attempt wrote it
			}
			w := ws[len(ws)-1]
			latest[p] = w
			a := attempt{RunID: w.RunID, StepKey: w.StepKey, Attempt: w.Attempt}
			if _, ok := inputs[a]; !ok {
				reads, err := src.Files(ctx, store.FileFilter{RunID: w.RunID, StepKey: w.StepKey, Attempt: w.Attempt, Role: store.FileRead})
				if err != nil {
					return nil, err
				}
				inputs[a] = reads
				queue(reads)
				if err := each(ctx, src, store.FileFilter{Role: store.FilePattern, Attempts: []attempt{a}}, addPattern); err != nil {
					return nil, err
				}
			}
		}
	}
	s := &staleness{check: memoized(check), latest: latest, inputs: func(w store.FileRecord) []store.FileRecord {
		return inputs[attempt{RunID: w.RunID, StepKey: w.StepKey, Attempt: w.Attempt}]
	}, patterns: func(w store.FileRecord) []string {
		return patterns[attempt{RunID: w.RunID, StepKey: w.StepKey, Attempt: w.Attempt}]
	}, memo: map[string]*string{}, matches: map[string][]string{}}
	defer func() { confirm(ctx, src, s.confirmed) }()
	var out []StaleFile
	sort.Strings(paths)
	for _, p := range paths {
		if reason := s.reason(ctx, p); reason != "" {
			w := latest[p]
			out = append(out, StaleFile{Path: p, Reason: reason, RunID: w.RunID, StepKey: w.StepKey, Attempt: w.Attempt})
		}
	}
	return out, ctx.Err()
}

// memoized returns check answering again, without a stat, for a record it was asked about
// before with the same path, hash, size and modification time (an input many outputs were made
// from is checked once).
func memoized(check Checker) Checker {
	type key struct {
		path, hash string
		size, mod  int64
	}
	seen := map[key]filehash.Result{}
	return func(ctx context.Context, rec store.FileRecord) filehash.Result {
		k := key{rec.Path, rec.Hash, rec.Size, rec.ModTime.UnixNano()}
		if r, ok := seen[k]; ok {
			return r
		}
		r := check(ctx, rec)
		seen[k] = r
		return r
	}
}

// each calls fn with every record matching f, a page at a time.
func each(ctx context.Context, src Source, f store.FileFilter, fn func(store.FileRecord)) error {
	f.Limit, f.AfterID = pageSize, 0
	for {
		page, err := src.Files(ctx, f)
		if err != nil {
			return err
		}
		for _, r := range page {
			fn(r)
		}
		if len(page) < pageSize {
			return nil
		}
		f.AfterID = page[len(page)-1].ID
	}
}

type staleness struct {
	check     Checker
	latest    map[string]store.FileRecord
	inputs    func(w store.FileRecord) []store.FileRecord
	patterns  func(w store.FileRecord) []string // the globs of w's attempt's declared reads
	matches   map[string][]string               // what each pattern matches now (expanded once)
	memo      map[string]*string                // reason by output path; "" fresh; nil entry: being computed (a cycle)
	confirmed []store.FileRecord                // the records to confirm (Confirmation)
}

// now is what the file of rec is now against rec, noting rec's confirmation if any.
func (s *staleness) now(ctx context.Context, rec store.FileRecord) Now {
	cur := s.check(ctx, rec)
	if c, ok := Confirmation(rec, cur); ok {
		s.confirmed = append(s.confirmed, c)
	}
	return compare(rec, cur)
}

// reason says why the output at path is stale, "" when it is not.
func (s *staleness) reason(ctx context.Context, path string) string {
	if r, ok := s.memo[path]; ok {
		if r == nil {
			return "" // a cycle (a step that rewrites its own input): judged by its hashes alone
		}
		return *r
	}
	s.memo[path] = nil
	w := s.latest[path]
	reason := ""
	switch s.now(ctx, w) {
	case NowMissing:
		reason = "deleted since it was made"
	case NowChanged:
		reason = "modified since it was made"
	}
	if reason == "" {
		for _, in := range s.inputs(w) {
			switch s.now(ctx, in) {
			case NowChanged:
				reason = "input changed: " + in.Path
			case NowMissing:
				reason = "input deleted: " + in.Path
			}
			if reason != "" {
				break
			}
			if _, out := s.latest[in.Path]; out && s.reason(ctx, in.Path) != "" {
				reason = "made from stale " + in.Path
				break
			}
		}
	}
	if reason == "" {
		if added := s.added(ctx, w); added != "" {
			reason = "input added: " + added
		}
	}
	s.memo[path] = &reason
	return reason
}

// added is the first file (by path) that a glob of the declared reads of w's attempt matches
// now and did not when the attempt ran (it is not among the attempt's reads), "" when none. A
// glob that cannot be expanded now (past filehash.DefaultMaxFiles matches, the walk cancelled)
// adds nothing.
func (s *staleness) added(ctx context.Context, w store.FileRecord) string {
	pats := s.patterns(w)
	if len(pats) == 0 {
		return ""
	}
	var read map[string]bool
	for _, p := range pats {
		now, ok := s.matches[p]
		if !ok {
			now, _ = filehash.ExpandContext(ctx, "", []string{p}, 0)
			s.matches[p] = now
		}
		for _, m := range now { // sorted
			if read == nil {
				read = map[string]bool{}
				for _, in := range s.inputs(w) {
					read[in.Path] = true
				}
			}
			if !read[m] {
				return m
			}
		}
	}
	return ""
}
