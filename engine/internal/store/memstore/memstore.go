// Package memstore is the in-memory store.Store: the default engine's persistence. Nothing
// survives the process; "durable" means "visible to every reader". It is built to be cheap per
// write (one mutex, a few small copies) and compact per record, with step and event records the
// garbage collector never scans, so a foreach of 100,000 items stays well inside the memory and
// time budget.
package memstore

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memslots"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

var (
	_ store.Store  = (*Store)(nil)
	_ store.Pruner = (*Store)(nil)
)

// chunkSize is the number of records per chunk of the event log, and stepChunk of a run's step
// table. Chunks never move, so appending never copies old records (but the first step chunk,
// which grows up to stepChunk so that small runs stay small).
const (
	chunkSize = 4096
	stepChunk = 256
)

// Store is an in-memory store.Store. The zero value is not usable; use New.
//
// Step and event records hold no pointers: their strings and JSON live in an append-only arena
// and their statuses as small codes, so that the garbage collector does not scan them and a run
// of 100,000 steps costs little memory and little GC work. Times come back in UTC. Slices
// returned by the read methods are shared with the store and must not be modified.
type Store struct {
	// The slots of scarce resources (resources.go), made on their first use.
	slotsOnce sync.Once
	slotTab   *memslots.Table

	mu      sync.RWMutex
	closed  bool
	seq     uint64       // last assigned event Seq
	events  [][]eventRec // the event log in Seq order; until a Prune, Seq s is at position s-1
	nevents int          // events in the log
	runs    map[string]*runRec
	runList []*runRec // by runRec.index, in the order the runs were created
	// unordered is set once a run was created with a CreatedAt before the run created before it:
	// until then runList is in CreatedAt order and ListRuns with a limit stops early.
	unordered bool
	idem      map[idemKey]store.IdempotencyEntry
	artefacts map[string][]byte
	bytes     arena
	codes     codes
	hash      func(string) uint64                // hashes step keys for the step index
	last      *runRec                            // the run written last: most writes are about the same run
	finished  []bool                             // by code: the code is a finished step status (see isFinished)
	workflows map[string][]store.WorkflowVersion // by name, oldest version first
	assets    assets                             // file records and cache entries (assets.go)
}

type runRec struct {
	run      store.Run
	index    uint32
	steps    [][]stepRec
	nsteps   int
	stepIdx  map[uint64]int32 // maphash of the key → index
	collided map[string]int32 // keys whose hash was taken by another key
	events   []uint32         // log positions of the run's events, ascending
	lastIdx  int32            // the step inserted last
	done     int              // steps in a finished status (the run's progress as committed)
	// atts are the kept attempts of the run's steps (store.AttemptLog), each step's chained
	// from its newest (stepRec.lastAtt) back; orphans chains those of steps without a row.
	atts     [][]attRec // in chunks of attChunk (see att)
	lastTool span       // the tool of the attempt written last
	lastEnv  span       // the env of the attempt written last
	natts    int32
	orphans  map[string]*int32
}

type stepRec struct {
	key, stepID, output, fileRefs span
	errKind, errMessage, errTrace span
	worker, logs, progress        span
	logsDropped                   int32
	started, finished, updated    int64
	attempt                       int32
	lastAtt                       int32 // 1 + the index of its newest kept attempt in runRec.atts; 0 = none
	kind, status                  uint16
	cached                        bool
}

type eventRec struct {
	seq              uint64
	time             int64
	stepKey, detail  span
	run              uint32 // runRec.index + 1; 0 for engine-level events
	attempt          int32
	completed, total int32
	typ, status      uint16
}

type idemKey struct{ scope, runID, key string }

// New returns an empty store.
func New() *Store {
	s := &Store{
		runs:      make(map[string]*runRec),
		idem:      make(map[idemKey]store.IdempotencyEntry),
		artefacts: make(map[string][]byte),
		bytes:     newArena(),
		codes:     newCodes(),
	}
	seed := maphash.MakeSeed()
	s.hash = func(k string) uint64 { return maphash.String(seed, k) }
	return s
}

var _ store.AttemptLog = (*Store)(nil)

// Write implements store.Store.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	if err := s.check(b); err != nil {
		return err
	}
	for i := range b.CreateRuns {
		r := cloneRun(b.CreateRuns[i])
		rec := &runRec{run: r, index: uint32(len(s.runList))}
		if n := len(s.runList); n > 0 && r.CreatedAt.Before(s.runList[n-1].run.CreatedAt) {
			s.unordered = true
		}
		s.runs[r.ID] = rec
		s.runList = append(s.runList, rec)
	}
	for _, u := range b.RunUpdates {
		rec := s.run(u.ID)
		rec.run.Status, rec.run.Error, rec.run.Progress = u.Status, cloneRunError(u.Error), u.Progress
		rec.run.UpdatedAt, rec.run.FinishedAt = u.UpdatedAt, u.FinishedAt
	}
	for i := range b.Steps {
		st := &b.Steps[i]
		rec := s.run(st.RunID)
		if !st.Insert || rec.stepIdx != nil {
			if idx, ok := s.findStep(rec, st.Key); ok {
				s.updateStep(rec, rec.step(int(idx)), st)
				continue
			}
		}
		s.insertStep(rec, st)
	}
	for _, e := range b.Idempotency {
		s.idem[idemKey{e.Scope, e.RunID, e.Key}] = e
	}
	s.appendEvents(b.Events)
	for i := range b.Attempts {
		s.putAttempt(&b.Attempts[i])
	}
	s.putFiles(b.Files)
	s.putCache(b.CacheEntries)
	return nil
}

// attRec is one kept attempt (store.Attempt), pointer-free like stepRec: its texts are in the
// arena, its status, error kind and host are codes.
type attRec struct {
	tool, args, worker         span
	errMessage, errTrace, exit span
	env                        span
	started, finished          int64
	attempt, pid               int32
	prev                       int32 // the step's previous kept attempt in runRec.atts, -1 for none
	status, errKind, host      uint16
}

// lastAttempt returns where the newest kept attempt of the step with key is recorded: 1 + its
// index in rec.atts, 0 when it has none. That is the step's row (stepRec.lastAtt) when the step
// is stored, else rec.orphans.
func (s *Store) lastAttempt(rec *runRec, key string) *int32 {
	if idx, ok := s.findStep(rec, key); ok {
		return &rec.step(int(idx)).lastAtt
	}
	if rec.orphans == nil {
		rec.orphans = map[string]*int32{}
	}
	p := rec.orphans[key]
	if p == nil {
		p = new(int32)
		rec.orphans[key] = p
	}
	return p
}

// putAttempt upserts a by its number and drops the attempt it pushes out of the window kept
// (store.AttemptDropped), reusing its slot. A step's kept attempts are chained from the newest
// (rec.att(i).prev) in descending order. s.mu is held; its run exists.
func (s *Store) putAttempt(a *store.Attempt) {
	rec := s.run(a.RunID)
	head := s.lastAttempt(rec, a.StepKey)
	tool := rec.lastTool // most attempts of a run call the tool its previous one did
	if !s.bytes.equal(tool, a.Tool) {
		tool = s.bytes.putString(a.Tool)
		rec.lastTool = tool
	}
	env := rec.lastEnv // and ran in the same environment
	if !s.bytes.equal(env, string(a.Env)) {
		env = s.bytes.put(a.Env)
		rec.lastEnv = env
	}
	r := attRec{
		tool: tool, args: s.bytes.put(a.Args), env: env,
		worker: s.bytes.putString(a.Worker), errMessage: s.bytes.putString(a.ErrorMessage),
		errTrace: s.bytes.putString(a.ErrorTrace), exit: s.bytes.putString(a.Exit),
		started: nanos(a.StartedAt), finished: nanos(a.FinishedAt), attempt: int32(a.Attempt), pid: int32(a.PID),
		status: s.codes.code(string(a.Status)), errKind: s.codes.code(a.ErrorKind), host: s.codes.code(a.Host),
	}
	// The same attempt again (its end after its start): replace it where it is.
	for i := *head - 1; i >= 0 && rec.att(i).attempt >= r.attempt; i = rec.att(i).prev {
		if rec.att(i).attempt == r.attempt {
			r.prev = rec.att(i).prev
			*rec.att(i) = r
			return
		}
	}
	slot := s.attemptSlot(rec, head, r.attempt)
	// Link it after the newest attempt below it (almost always: as the newest).
	next := int32(-1)
	i := *head - 1
	for i >= 0 && rec.att(i).attempt > r.attempt {
		next, i = i, rec.att(i).prev
	}
	r.prev = i
	*rec.att(slot) = r
	if next < 0 {
		*head = slot + 1
	} else {
		rec.att(next).prev = slot
	}
}

// attemptSlot returns the slot of rec.atts a new attempt n of a step goes in: the slot of the
// attempt it pushes out of the window kept, unlinked from the step's chain (head), else a new
// one.
func (s *Store) attemptSlot(rec *runRec, head *int32, n int32) int32 {
	if d := int32(store.AttemptDropped(int(n))); d > 0 {
		next := int32(-1)
		for i := *head - 1; i >= 0 && rec.att(i).attempt >= d; next, i = i, rec.att(i).prev {
			if rec.att(i).attempt == d {
				if next < 0 {
					*head = rec.att(i).prev + 1
				} else {
					rec.att(next).prev = rec.att(i).prev
				}
				return i
			}
		}
	}
	c := len(rec.atts)
	if c == 0 || len(rec.atts[c-1]) == attChunk {
		size := attChunk // the first chunk starts small and grows up to attChunk
		if c == 0 {
			size = 4
		}
		rec.atts = append(rec.atts, make([]attRec, 0, size))
		c++
	}
	rec.atts[c-1] = append(rec.atts[c-1], attRec{}) // a small first chunk grows up to attChunk
	rec.natts++
	return rec.natts - 1
}

// attChunk is the attempt records per chunk of runRec.atts (no slice doubling past it).
const attChunk = 1024

// att returns the attempt record at index i of rec.
func (rec *runRec) att(i int32) *attRec {
	if len(rec.atts) == 1 {
		return &rec.atts[0][i]
	}
	return &rec.atts[i/attChunk][i%attChunk]
}

func (s *Store) attemptOf(runID, key string, r *attRec) store.Attempt {
	return store.Attempt{RunID: runID, StepKey: key, Attempt: int(r.attempt), Tool: s.bytes.string(r.tool),
		Status: run.StepStatus(s.codes.name(r.status)), Args: json.RawMessage(s.bytes.bytes(r.args)),
		Worker: s.bytes.string(r.worker), Host: s.codes.name(r.host), PID: int(r.pid), ErrorKind: s.codes.name(r.errKind),
		ErrorMessage: s.bytes.string(r.errMessage), ErrorTrace: s.bytes.string(r.errTrace), Exit: s.bytes.string(r.exit),
		Env: json.RawMessage(s.bytes.bytes(r.env)), StartedAt: unnanos(r.started), FinishedAt: unnanos(r.finished)}
}

// stepAttempts returns the kept attempts of the step whose newest is at last, oldest first.
func (s *Store) stepAttempts(rec *runRec, key string, last int32) []store.Attempt {
	var out []store.Attempt
	for i := last; i >= 0; i = rec.att(i).prev {
		out = append(out, s.attemptOf(rec.run.ID, key, rec.att(i)))
	}
	slices.Reverse(out)
	return out
}

// ListAttempts implements store.AttemptLog.
func (s *Store) ListAttempts(ctx context.Context, runID, stepKey string) ([]store.Attempt, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	rec := s.runs[runID]
	if rec == nil || rec.natts == 0 {
		return nil, nil
	}
	var out []store.Attempt
	if stepKey != "" {
		if i := s.peekLast(rec, stepKey); i >= 0 {
			out = s.stepAttempts(rec, stepKey, i)
		}
	} else {
		for i := range rec.nsteps {
			if st := rec.step(i); st.lastAtt > 0 {
				out = append(out, s.stepAttempts(rec, s.bytes.string(st.key), st.lastAtt-1)...)
			}
		}
		for key, l := range rec.orphans {
			if *l > 0 {
				out = append(out, s.stepAttempts(rec, key, *l-1)...)
			}
		}
	}
	if stepKey == "" {
		slices.SortStableFunc(out, func(a, b store.Attempt) int {
			if c := cmp.Compare(a.StepKey, b.StepKey); c != 0 {
				return c
			}
			return a.Attempt - b.Attempt
		})
	}
	return out, nil
}

// peekLast is lastAttempt for a reader (s.mu read-locked): it builds no index. -1 when the step
// has no attempt.
func (s *Store) peekLast(rec *runRec, key string) int32 {
	if l, ok := rec.orphans[key]; ok {
		return *l - 1
	}
	if rec.stepIdx != nil { // the index by key hash, when a writer built it
		idx, ok := rec.stepIdx[s.hash(key)]
		if ok && s.bytes.equal(rec.step(int(idx)).key, key) {
			return rec.step(int(idx)).lastAtt - 1
		}
		if idx, ok := rec.collided[key]; ok {
			return rec.step(int(idx)).lastAtt - 1
		}
		return -1
	}
	for i := range rec.nsteps {
		if st := rec.step(i); st.lastAtt > 0 && s.bytes.equal(st.key, key) {
			return st.lastAtt - 1
		}
	}
	return -1
}

// Resumes implements store.AttemptLog.
func (s *Store) Resumes(ctx context.Context, runID string) ([]run.Event, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	rec := s.runs[runID]
	if rec == nil {
		return nil, nil
	}
	var out []run.Event
	for _, i := range rec.events {
		if s.codes.name(s.eventAt(int(i)).typ) == run.EventWorkflowResumed {
			out = append(out, s.event(int(i)))
		}
	}
	return out, nil
}

// appendEvents appends events to the log, setting each one's Seq. Their runs exist. s.mu is
// held.
func (s *Store) appendEvents(events []run.Event) {
	var last *runRec
	for i := range events {
		e := &events[i]
		s.seq++
		e.Seq = s.seq
		if last == nil || last.run.ID != e.RunID {
			last = s.run(e.RunID)
		}
		ev := eventRec{
			seq: s.seq, time: nanos(e.Time), stepKey: s.bytes.putString(e.StepKey), detail: s.bytes.put(e.Detail),
			attempt: int32(e.Attempt), completed: int32(e.Progress.Completed), total: int32(e.Progress.Total),
			typ: s.codes.code(e.Type), status: s.codes.code(e.Status),
		}
		if last != nil {
			ev.run = last.index + 1
			last.events = append(last.events, uint32(s.nevents))
		}
		s.appendEvent(ev)
	}
}

// check validates a batch before anything is applied.
func (s *Store) check(b *store.Batch) error {
	if len(b.Fires) > 0 {
		return fmt.Errorf("memstore: a batch with fires; this store keeps no fire history (store.FireLog)")
	}
	var created map[string]bool
	for _, r := range b.CreateRuns {
		if r.ID == "" {
			return fmt.Errorf("memstore: creating a run with an empty id")
		}
		if _, ok := s.runs[r.ID]; ok || created[r.ID] {
			return fmt.Errorf("creating run %s: %w", r.ID, store.ErrExists)
		}
		if created == nil {
			created = map[string]bool{}
		}
		created[r.ID] = true
	}
	known := func(id string) bool { return s.run(id) != nil || created[id] }
	for _, u := range b.RunUpdates {
		if !known(u.ID) {
			return fmt.Errorf("updating run %s: %w", u.ID, store.ErrNotFound)
		}
	}
	for _, st := range b.Steps {
		if !known(st.RunID) {
			return fmt.Errorf("writing step %s of run %s: %w", st.Key, st.RunID, store.ErrNotFound)
		}
	}
	for _, e := range b.Events {
		if e.RunID != "" && !known(e.RunID) {
			return fmt.Errorf("appending a %s event of run %s: %w", e.Type, e.RunID, store.ErrNotFound)
		}
	}
	for _, a := range b.Attempts {
		if !known(a.RunID) {
			return fmt.Errorf("writing attempt %d of step %s of run %s: %w", a.Attempt, a.StepKey, a.RunID, store.ErrNotFound)
		}
	}
	for _, f := range b.Files {
		if !known(f.RunID) {
			return fmt.Errorf("file record %s (%s) of attempt %d of step %s of run %s: %w", f.Path, f.Role, f.Attempt, f.StepKey, f.RunID, store.ErrNotFound)
		}
	}
	for _, e := range b.CacheEntries {
		if !known(e.RunID) {
			return fmt.Errorf("cache entry %s of step %s of run %s: %w", e.Key, e.StepKey, e.RunID, store.ErrNotFound)
		}
	}
	return nil
}

// run returns the record of run id, or nil; it caches the last one found.
func (s *Store) run(id string) *runRec {
	if s.last != nil && s.last.run.ID == id {
		return s.last
	}
	rec := s.runs[id]
	if rec != nil {
		s.last = rec
	}
	return rec
}

// findStep finds the step of rec with key. The index by key hash is built on the first lookup
// that the "last inserted" shortcut cannot answer: runs whose writers give the Insert hint and
// update steps in order (sequential flows) never need it.
func (s *Store) findStep(rec *runRec, key string) (int32, bool) {
	if rec.nsteps == 0 {
		return 0, false
	}
	if s.bytes.equal(rec.step(int(rec.lastIdx)).key, key) {
		return rec.lastIdx, true
	}
	if rec.stepIdx == nil {
		rec.stepIdx = make(map[uint64]int32, rec.nsteps)
		for i := range rec.nsteps {
			s.index(rec, s.bytes.string(rec.step(i).key), int32(i))
		}
	}
	idx, ok := rec.stepIdx[s.hash(key)]
	if !ok {
		return 0, false
	}
	if s.bytes.equal(rec.step(int(idx)).key, key) {
		return idx, true
	}
	idx, ok = rec.collided[key]
	return idx, ok
}

// index adds key → idx to the index of rec.
func (s *Store) index(rec *runRec, key string, idx int32) {
	h := s.hash(key)
	if _, taken := rec.stepIdx[h]; taken {
		if rec.collided == nil {
			rec.collided = make(map[string]int32)
		}
		rec.collided[key] = idx
		return
	}
	rec.stepIdx[h] = idx
}

func (s *Store) insertStep(rec *runRec, st *store.Step) {
	idx := int32(rec.nsteps)
	if rec.stepIdx != nil {
		s.index(rec, st.Key, idx)
	}
	rec.lastIdx = idx
	n := len(rec.steps)
	switch {
	case n == 0:
		rec.steps = append(rec.steps, make([]stepRec, 0, 4))
	case len(rec.steps[n-1]) == stepChunk:
		rec.steps = append(rec.steps, make([]stepRec, 0, stepChunk))
	}
	n = len(rec.steps)
	rec.steps[n-1] = append(rec.steps[n-1], stepRec{key: s.bytes.putString(st.Key)})
	rec.nsteps++
	s.updateStep(rec, rec.step(int(idx)), st)
}

// updateStep replaces every field of r, a step of rec, but its key. Unchanged strings are not
// stored again.
func (s *Store) updateStep(rec *runRec, r *stepRec, st *store.Step) {
	a := &s.bytes
	if !a.equal(r.stepID, st.StepID) {
		r.stepID = a.putString(st.StepID)
	}
	r.output, r.fileRefs = a.put(st.Output), a.put(st.FileRefs)
	r.errKind, r.errMessage, r.errTrace = a.putString(st.ErrorKind), a.putString(st.ErrorMessage), a.putString(st.ErrorTrace)
	if !bytes.Equal(a.bytes(r.logs), st.Logs) { // a running tool's progress rewrites the row, not its lines
		r.logs = a.put(st.Logs)
	}
	r.worker, r.logsDropped, r.progress = a.putString(st.Worker), int32(st.LogsDropped), a.put(st.Progress)
	r.started, r.finished, r.updated = nanos(st.StartedAt), nanos(st.FinishedAt), nanos(st.UpdatedAt)
	r.attempt, r.cached = int32(st.Attempt), st.Cached
	status := s.codes.code(string(st.Status))
	if was, is := s.isFinished(r.status), s.isFinished(status); was != is {
		if is {
			rec.done++
		} else {
			rec.done--
		}
	}
	r.kind, r.status = s.codes.code(st.Kind), status
}

// isFinished reports whether code c is a finished step status.
func (s *Store) isFinished(c uint16) bool {
	for len(s.finished) <= int(c) {
		s.finished = append(s.finished, run.StepStatus(s.codes.name(uint16(len(s.finished)))).Terminal())
	}
	return s.finished[c]
}

// runOf returns a copy of rec's run with its progress as committed (store.Store: Run.Progress):
// the stored one for a finished run, else its steps in a finished status and the total of its
// newest event.
func (s *Store) runOf(rec *runRec) store.Run {
	r := cloneRun(rec.run)
	if !r.Status.Terminal() {
		r.Progress = s.committedProgress(rec)
	}
	return r
}

func (s *Store) committedProgress(rec *runRec) run.Progress {
	p := run.Progress{Completed: rec.done, Total: rec.run.Progress.Total}
	if n := len(rec.events); n > 0 {
		p.Total = int(s.eventAt(int(rec.events[n-1])).total)
	}
	p.Total = max(p.Total, p.Completed)
	return p
}

func (rec *runRec) step(i int) *stepRec { return &rec.steps[i/stepChunk][i%stepChunk] }

func (s *Store) stepOf(runID string, r *stepRec) store.Step {
	a := &s.bytes
	return store.Step{
		RunID: runID, Key: a.string(r.key), StepID: a.string(r.stepID), Kind: s.codes.name(r.kind),
		Status: run.StepStatus(s.codes.name(r.status)), Attempt: int(r.attempt), Cached: r.cached,
		Output: a.bytes(r.output), FileRefs: a.bytes(r.fileRefs),
		ErrorKind: a.string(r.errKind), ErrorMessage: a.string(r.errMessage), ErrorTrace: a.string(r.errTrace),
		Worker: a.string(r.worker), Logs: a.bytes(r.logs), LogsDropped: int(r.logsDropped), Progress: a.bytes(r.progress),
		StartedAt: unnanos(r.started), FinishedAt: unnanos(r.finished), UpdatedAt: unnanos(r.updated),
	}
}

func (s *Store) appendEvent(e eventRec) {
	s.events = appendEventRec(s.events, e)
	s.nevents++
}

// appendEventRec appends e to the chunked log.
func appendEventRec(log [][]eventRec, e eventRec) [][]eventRec {
	n := len(log)
	if n == 0 || len(log[n-1]) == chunkSize {
		log = append(log, make([]eventRec, 0, chunkSize))
		n++
	}
	log[n-1] = append(log[n-1], e)
	return log
}

// eventAt returns the event at position i of the log.
func (s *Store) eventAt(i int) *eventRec { return &s.events[i/chunkSize][i%chunkSize] }

// firstAfter returns the position of the first event with a Seq above seq (nevents if none).
func (s *Store) firstAfter(seq uint64) int {
	if uint64(s.nevents) == s.seq { // nothing pruned: Seq s is at position s-1
		return int(min(seq, s.seq))
	}
	return sort.Search(s.nevents, func(i int) bool { return s.eventAt(i).seq > seq })
}

func (s *Store) event(i int) run.Event {
	e := s.eventAt(i)
	ev := run.Event{
		Seq: e.seq, Time: unnanos(e.time), Type: s.codes.name(e.typ), StepKey: s.bytes.string(e.stepKey),
		Status: s.codes.name(e.status), Attempt: int(e.attempt), Detail: s.bytes.bytes(e.detail),
		Progress: run.Progress{Completed: int(e.completed), Total: int(e.total)},
	}
	if e.run > 0 {
		ev.RunID = s.runList[e.run-1].run.ID
	}
	return ev
}

// nanos and unnanos convert times to and from Unix nanoseconds; 0 stands for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func unnanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func cloneRunError(e *store.RunError) *store.RunError {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

func cloneRun(r store.Run) store.Run {
	r.Error = cloneRunError(r.Error)
	r.EnvAllow = slices.Clone(r.EnvAllow)
	if r.Priority != nil {
		p := *r.Priority
		r.Priority = &p
	}
	return r
}

// GetRun implements store.Store.
func (s *Store) GetRun(ctx context.Context, id string) (store.Run, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.Run{}, store.ErrClosed
	}
	rec, ok := s.runs[id]
	if !ok {
		return store.Run{}, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return s.runOf(rec), nil
}

// ListRuns implements store.Store.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	match := func(r *store.Run) bool {
		return (len(f.Statuses) == 0 || slices.Contains(f.Statuses, r.Status)) &&
			(f.Name == "" || r.Name == f.Name) &&
			(f.ParentRunID == "" || r.ParentRunID == f.ParentRunID) &&
			(f.Since.IsZero() || !r.CreatedAt.Before(f.Since)) &&
			(f.Until.IsZero() || r.CreatedAt.Before(f.Until)) &&
			(f.After == nil || f.After.Before(r.CreatedAt, r.ID))
	}
	if f.Searches() {
		plain := match
		match = func(r *store.Run) bool { return plain(r) && s.searchMatch(s.runs[r.ID], &f) }
	}
	var picked []*runRec
	if f.Limit > 0 && !s.unordered {
		// Newest first: once limit runs are picked, an older run cannot be among the newest
		// (runs created at the same time as the last pick are still looked at, for the ID order).
		for i := len(s.runList) - 1; i >= 0; i-- {
			rec := s.runList[i]
			if len(picked) >= f.Limit && rec.run.CreatedAt.Before(picked[len(picked)-1].run.CreatedAt) {
				break
			}
			if match(&rec.run) {
				picked = append(picked, rec)
			}
		}
	} else {
		for _, rec := range s.runList {
			if match(&rec.run) {
				picked = append(picked, rec)
			}
		}
	}
	slices.SortFunc(picked, func(a, b *runRec) int {
		if c := b.run.CreatedAt.Compare(a.run.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.run.ID, a.run.ID)
	})
	if f.Limit > 0 && len(picked) > f.Limit {
		picked = picked[:f.Limit]
	}
	var out []store.Run
	for _, rec := range picked {
		out = append(out, s.runOf(rec))
	}
	return out, nil
}

// ListSteps implements store.Store.
func (s *Store) ListSteps(ctx context.Context, runID string) ([]store.Step, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	rec, ok := s.runs[runID]
	if !ok {
		return nil, fmt.Errorf("run %s: %w", runID, store.ErrNotFound)
	}
	if rec.nsteps == 0 {
		return nil, nil
	}
	out := make([]store.Step, rec.nsteps)
	for i := range out {
		out[i] = s.stepOf(runID, rec.step(i))
	}
	return out, nil
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]run.Event, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	var out []run.Event
	// selected reports whether the event at position i is of one of f.Types (when given).
	selected := func(i int) bool {
		return len(f.Types) == 0 || slices.Contains(f.Types, s.codes.name(s.eventAt(i).typ))
	}
	if f.RunID != "" {
		rec := s.runs[f.RunID]
		if rec == nil {
			return nil, nil
		}
		i := sort.Search(len(rec.events), func(i int) bool { return s.eventAt(int(rec.events[i])).seq > f.AfterSeq })
		for ; i < len(rec.events) && (f.Limit <= 0 || len(out) < f.Limit); i++ {
			if selected(int(rec.events[i])) {
				out = append(out, s.event(int(rec.events[i])))
			}
		}
		return out, nil
	}
	for i := s.firstAfter(f.AfterSeq); i < s.nevents && (f.Limit <= 0 || len(out) < f.Limit); i++ {
		if selected(i) {
			out = append(out, s.event(i))
		}
	}
	return out, nil
}

// LastSeq implements store.Store.
func (s *Store) LastSeq(ctx context.Context) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	return s.seq, nil
}

// GetIdempotency implements store.Store.
func (s *Store) GetIdempotency(ctx context.Context, scope, runID, key string, now time.Time) (store.IdempotencyEntry, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.IdempotencyEntry{}, false, store.ErrClosed
	}
	e, ok := s.idem[idemKey{scope, runID, key}]
	if !ok || expired(e, now) {
		return store.IdempotencyEntry{}, false, nil
	}
	return e, true, nil
}

func expired(e store.IdempotencyEntry, now time.Time) bool {
	return !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt)
}

// PurgeExpired implements store.Store.
func (s *Store) PurgeExpired(ctx context.Context, now time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	n := 0
	for k, e := range s.idem {
		if expired(e, now) {
			delete(s.idem, k)
			n++
		}
	}
	return n, nil
}

// MarkInterrupted implements store.Store: everything under one lock hold, so a reader sees all
// of it or none of it.
func (s *Store) MarkInterrupted(ctx context.Context, now time.Time, in store.Interruption) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	var ids []string
	interrupted := s.codes.code(string(run.StepInterrupted))
	for id, rec := range s.runs {
		if rec.run.Status.Terminal() {
			continue
		}
		paused := rec.run.Status == run.StatusPaused
		for i := range rec.nsteps {
			st := rec.step(i)
			if !s.isFinished(st.status) {
				st.status = interrupted
				st.updated, st.finished = nanos(now), nanos(now)
				rec.done++
			}
		}
		if paused { // it stays paused (Unpause resumes it), its steps in flight interrupted
			continue
		}
		rec.run.Progress = s.committedProgress(rec)
		rec.run.Status, rec.run.Error = run.StatusInterrupted, cloneRunError(in.Error)
		rec.run.UpdatedAt, rec.run.FinishedAt = now, now
		ids = append(ids, id)
	}
	slices.Sort(ids)
	events := make([]run.Event, len(ids))
	for i, id := range ids {
		events[i] = run.Event{Time: now, RunID: id, Type: run.EventInterrupted, Status: string(run.StatusInterrupted),
			Progress: s.runs[id].run.Progress, Detail: in.Detail}
	}
	s.appendEvents(events)
	return ids, nil
}

// Prune implements store.Pruner. The records of the runs it deletes are dropped and the
// survivors' step and event bytes are copied into a fresh arena, so their memory is returned
// to the garbage collector (slices handed out earlier stay valid).
func (s *Store) Prune(ctx context.Context, olderThan time.Time, statuses []run.Status) (int, error) {
	return s.prune(olderThan, statuses, nil)
}

// prunable reports whether Prune(olderThan, statuses) deletes r.
func prunable(r *store.Run, olderThan time.Time, statuses []run.Status) bool {
	return r.Status.Terminal() && (len(statuses) == 0 || slices.Contains(statuses, r.Status)) &&
		!r.FinishedAt.IsZero() && r.FinishedAt.Before(olderThan)
}

// PruneCandidates implements store.Pruner.
func (s *Store) PruneCandidates(ctx context.Context, olderThan time.Time, statuses []run.Status, limit int) ([]store.Run, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	var out []store.Run
	for _, rec := range s.runList {
		if r := &rec.run; prunable(r, olderThan, statuses) {
			out = append(out, store.Run{ID: r.ID, Name: r.Name, Status: r.Status, Origin: r.Origin,
				CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt})
		}
	}
	slices.SortFunc(out, func(a, b store.Run) int {
		if c := a.FinishedAt.Compare(b.FinishedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// PruneRuns implements store.Pruner, in one pass under the lock (compacting the arena once,
// however many runs go), then calls progress once.
func (s *Store) PruneRuns(ctx context.Context, ids []string, olderThan time.Time, statuses []run.Status, progress func(deleted int)) (int, error) {
	only := make(map[string]bool, len(ids))
	for _, id := range ids {
		only[id] = true
	}
	n, err := s.prune(olderThan, statuses, only)
	if err == nil && progress != nil {
		progress(n)
	}
	return n, err
}

// prune deletes the runs Prune would delete, only those in only when it is not nil.
func (s *Store) prune(olderThan time.Time, statuses []run.Status, only map[string]bool) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	doomed := make([]bool, len(s.runList))
	n := 0
	for i, rec := range s.runList {
		if r := &rec.run; prunable(r, olderThan, statuses) && (only == nil || only[r.ID]) {
			doomed[i] = true
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	for k := range s.idem {
		if rec := s.runs[k.runID]; k.scope == "workflow" && rec != nil && doomed[rec.index] {
			delete(s.idem, k)
		}
	}
	s.assets.dropRuns(func(id string) bool {
		rec := s.runs[id]
		return rec != nil && doomed[rec.index]
	})
	s.compact(doomed)
	return n, nil
}

// compact drops the runs marked in doomed (by runRec.index) with their events, and copies
// what survives into a fresh arena and event log.
func (s *Store) compact(doomed []bool) {
	old := s.bytes
	s.bytes = newArena()
	a := &s.bytes
	moved := func(sp span) span { return a.put(old.bytes(sp)) }
	index := make([]uint32, len(s.runList)) // old index → new index + 1; 0 = deleted
	list := make([]*runRec, 0, len(s.runList))
	for i, rec := range s.runList {
		if doomed[i] {
			delete(s.runs, rec.run.ID)
			continue
		}
		rec.index = uint32(len(list))
		index[i] = rec.index + 1
		list = append(list, rec)
		for j := range rec.nsteps {
			st := rec.step(j)
			st.key, st.stepID, st.output, st.fileRefs = moved(st.key), moved(st.stepID), moved(st.output), moved(st.fileRefs)
			st.errKind, st.errMessage, st.errTrace = moved(st.errKind), moved(st.errMessage), moved(st.errTrace)
			st.worker, st.logs, st.progress = moved(st.worker), moved(st.logs), moved(st.progress)
		}
		for j := range rec.natts {
			at := rec.att(j)
			at.tool, at.args, at.worker = moved(at.tool), moved(at.args), moved(at.worker)
			rec.lastTool, rec.lastEnv = span{}, span{} // in the old arena
			at.env = moved(at.env)
			at.errMessage, at.errTrace, at.exit = moved(at.errMessage), moved(at.errTrace), moved(at.exit)
		}
		rec.events = nil
	}
	var log [][]eventRec
	kept := 0
	for i := range s.nevents {
		e := *s.eventAt(i)
		if e.run > 0 {
			if index[e.run-1] == 0 {
				continue
			}
			e.run = index[e.run-1]
			rec := list[e.run-1]
			rec.events = append(rec.events, uint32(kept))
		}
		e.stepKey, e.detail = moved(e.stepKey), moved(e.detail)
		log = appendEventRec(log, e)
		kept++
	}
	s.runList, s.events, s.nevents, s.last = list, log, kept, nil
}

// PutArtefact implements store.ArtefactStore.
func (s *Store) PutArtefact(ctx context.Context, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", store.ErrClosed
	}
	if _, ok := s.artefacts[h]; !ok {
		s.artefacts[h] = slices.Clone(data)
	}
	return h, nil
}

// GetArtefact implements store.ArtefactStore.
func (s *Store) GetArtefact(ctx context.Context, sha string) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	b, ok := s.artefacts[sha]
	if !ok {
		return nil, fmt.Errorf("artefact %s: %w", sha, store.ErrNotFound)
	}
	return slices.Clone(b), nil
}

// Close implements store.Store. It drops every record.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.runs, s.runList, s.idem, s.artefacts, s.events, s.nevents, s.last = nil, nil, nil, nil, nil, 0, nil
	s.assets = assets{}
	s.bytes = newArena()
	return nil
}

// searchMatch reports whether rec matches the search fields of f (store.RunFilter), as the
// SQL stores answer them from their indexes. s.mu is held.
func (s *Store) searchMatch(rec *runRec, f *store.RunFilter) bool {
	if len(f.Inputs) > 0 {
		var in map[string]json.RawMessage
		if json.Unmarshal(rec.run.Inputs, &in) != nil {
			return false
		}
		for k, v := range f.Inputs {
			if got, ok := searchInput(in[k]); !ok || got != v || utf8.RuneCountInString(k) > store.MaxSearchText {
				return false
			}
		}
	}
	if len(f.StepStatuses) > 0 {
		ok := false
		for i := 0; i < rec.nsteps && !ok; i++ {
			ok = slices.Contains(f.StepStatuses, run.StepStatus(s.codes.name(rec.step(i).status)))
		}
		if !ok {
			return false
		}
	}
	// The error kind and the error text are separate conditions: each may be met by a
	// different step or attempt.
	for _, c := range []struct{ kind, text string }{{f.ErrorKind, ""}, {"", asciiLower(f.ErrorText)}} {
		if c.kind == "" && c.text == "" {
			continue
		}
		one := func(kind, msg string) bool {
			if c.kind != "" {
				return kind == c.kind
			}
			return strings.Contains(asciiLower(msg), c.text)
		}
		ok := rec.run.Error != nil && one(rec.run.Error.Kind, rec.run.Error.Message) // the run's own
		for i := 0; i < rec.nsteps && !ok; i++ {
			st := rec.step(i)
			msg := s.bytes.string(st.errMessage)
			ok = msg != "" && one(s.bytes.string(st.errKind), msg)
		}
		for i := int32(0); i < rec.natts && !ok; i++ {
			a := rec.att(i)
			kind := s.codes.name(a.errKind)
			ok = kind != "" && one(kind, s.bytes.string(a.errMessage)) // SQL: error_kind IS NOT NULL
		}
		if !ok {
			return false
		}
	}
	if f.Tool != "" || f.Worker != "" {
		tool, worker := f.Tool == "", f.Worker == ""
		for i := int32(0); i < rec.natts && !(tool && worker); i++ {
			a := rec.att(i)
			tool = tool || s.bytes.string(a.tool) == f.Tool
			w := s.bytes.string(a.worker)
			worker = worker || w == f.Worker || strings.HasPrefix(w, f.Worker+"/")
		}
		if !tool || !worker {
			return false
		}
	}
	return true
}

// searchInput returns the text a search by input value matches an input member by (see
// store.RunFilter.Inputs): a string's own text, an int64's decimal text, "true" or "false";
// ok is false for any other value and for a text longer than store.MaxSearchText characters.
func searchInput(v json.RawMessage) (text string, ok bool) {
	if len(v) == 0 {
		return "", false
	}
	switch v[0] {
	case '"':
		if json.Unmarshal(v, &text) != nil {
			return "", false
		}
	case 't', 'f':
		text = string(v)
	default:
		if _, err := strconv.ParseInt(string(v), 10, 64); err != nil {
			return "", false // a real, a nested value or null
		}
		text = string(v)
	}
	return text, utf8.RuneCountInString(text) <= store.MaxSearchText
}

// asciiLower lowers the ASCII letters of s only, as SQL LIKE does.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}
