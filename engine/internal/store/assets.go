package store

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"time"
)

// Assets is what a store keeps of the files steps read and write, and the content cache of
// steps with cache: on (docs/guide/assets.md). File records and cache entries are written in a
// Batch (Batch.Files, Batch.CacheEntries) with the attempt they belong to; Prune deletes them
// with their run.
type Assets interface {
	// Files returns the file records matching f, by ID (the order they were recorded in), at
	// most f.Limit (≤ 0 = all).
	Files(ctx context.Context, f FileFilter) ([]FileRecord, error)
	// CacheEntries returns the entries of key that have not expired at now (ExpiresAt zero or
	// after now), newest CreatedAt first (SortCache), each with the file records of its attempt
	// in CacheEntry.Files: what a cache lookup checks, read at once (one query in the SQL
	// stores).
	CacheEntries(ctx context.Context, key string, now time.Time) ([]CacheEntry, error)
	// ListCache returns the entries matching f, newest CreatedAt first, expired ones too, with
	// no Files.
	ListCache(ctx context.Context, f CacheFilter) ([]CacheEntry, error)
	// PurgeCache deletes the entries matching f (f.Limit is ignored) and returns how many.
	PurgeCache(ctx context.Context, f CacheFilter) (int, error)
	// ConfirmFiles stores that files were read again and found as recorded
	// (FileRecord.VerifiedAt): for each of recs, the stored record with its ID gets its
	// VerifiedAt when that record's State is FileOK, its Hash, Size, ModTime, Dev and Ino are
	// recs's (it was not written again since with other values) and its own VerifiedAt is
	// earlier; any other record, or an ID not stored (pruned), is left as it is. It returns how
	// many records it changed. A read-only store returns its error and changes nothing.
	ConfirmFiles(ctx context.Context, recs []FileRecord) (int, error)
}

// FileRole says whether an attempt read or wrote a file, or names a pattern its files were
// found by.
type FileRole string

// File roles.
const (
	FileRead  FileRole = "read"
	FileWrite FileRole = "write"
	// FilePattern is not a file: the record of a glob in a step's declared reads, as the
	// attempt expanded it (Path: the pattern, absolute, base quoted: filehash.AbsPattern;
	// State FileOK; no hash, size or times). Staleness expands it again to see the files that
	// match it now and did not then (lineage.Stale: "input added"). A FileFilter selects
	// pattern records only when its Role is FilePattern or it has WithPatterns, and
	// CacheEntry.Files has none.
	FilePattern FileRole = "pattern"
)

// FileState says what the engine learnt of a file when it recorded it.
type FileState string

// File states.
const (
	// FileOK: the file was read whole and did not change meanwhile; Hash is set.
	FileOK FileState = "ok"
	// FileMissing: there was no file at Path when the attempt ended.
	FileMissing FileState = "missing"
	// FileUnreadable: something is at Path but could not be hashed (permissions, a directory,
	// a symlink loop); Error says why.
	FileUnreadable FileState = "unreadable"
	// FileUnstable: the file changed while it was hashed (its size, modification time or
	// identity moved): an attempt with an unstable file is never cached.
	FileUnstable FileState = "unstable"
)

// FileRecord is one file one attempt read or wrote. One record per (RunID, StepKey, Attempt,
// Role, Path): writing the same one again replaces it.
type FileRecord struct {
	ID      int64 // assigned by the store, > 0; ignored when writing
	RunID   string
	StepKey string
	Attempt int
	Role    FileRole
	// Path is absolute and cleaned, in its OS's form (filehash.Clean): "/mnt/show/a.usd",
	// `C:\show\a.usd`, `\\server\share\a.usd`. Lookups compare it exactly.
	Path  string
	State FileState
	Size  int64
	// ModTime is the modification time, to the nanosecond where the file system has it.
	ModTime time.Time
	// Dev and Ino are the file's device and inode (the file index on Windows); 0 where the OS
	// does not say. With Size and ModTime they tell an unchanged file without reading it.
	Dev, Ino uint64
	// Hash is "blake3:" and 64 hex digits when State is FileOK, else "".
	Hash string
	// Error says why the file is unreadable or unstable; "" otherwise.
	Error      string
	RecordedAt time.Time
	// VerifiedAt is when Hash was last read from the file with this record's Size, ModTime, Dev
	// and Ino: the wall clock just before the stat of that read (filehash.Result.ReadAt) — at
	// first the attempt's own hash, later a check that read the file again and found it so
	// (Assets.ConfirmFiles). It decides whether a stat equal to the record's stands for its hash
	// without reading the file: only when ModTime is RacyWindow or more before it
	// (filehash.IsRacy; docs/design/filehash.md, "The stat cache"). Zero: never read (a file not
	// ok, or a record stored before the field existed: it is read again, then confirmed).
	// Written as given (a record written again replaces it).
	VerifiedAt time.Time
}

// FileFilter selects file records; its zero value selects every one.
type FileFilter struct {
	RunID   string
	StepKey string
	Attempt int      // 0 = every attempt
	Role    FileRole // "" = read and write (not FilePattern, unless WithPatterns)
	// WithPatterns, with Role "", selects the FilePattern records too: every record.
	WithPatterns bool
	Path         string // exact; "" = any
	// Under selects the paths equal to it or inside it, a directory (filehash.Under); "" = any.
	Under string
	// Attempts selects the records of these attempts (any of them); nil = no such condition.
	Attempts []AttemptRef
	AfterID  int64 // records with a larger ID (paging); 0 = from the first
	Limit    int   // ≤ 0 = all
}

// SelectsNone reports whether f selects no record whatever is stored: Attempts given, and empty.
func (f FileFilter) SelectsNone() bool { return f.Attempts != nil && len(f.Attempts) == 0 }

// PagesAWideSelection reports whether f asks for a page (Limit 1 to maxLimit) of a selection an
// index answers but not in ID order — the records under a directory, of a run or of listed
// attempts — which a SQL store reads from the table in ID order instead (its first pages would
// otherwise sort the whole selection each).
func (f FileFilter) PagesAWideSelection(maxLimit int) bool {
	return f.Limit > 0 && f.Limit <= maxLimit && f.Path == "" && (f.Under != "" || f.RunID != "" || f.Attempts != nil)
}

// AttemptRef names one attempt of one step instance.
type AttemptRef struct {
	RunID   string
	StepKey string
	Attempt int
}

// CacheEntry is one completed attempt a later step with the same cache key may stand in for
// (docs/guide/assets.md, "Caching"): it is used only while the files that attempt read still
// have their recorded hashes and the files it wrote still exist with theirs. One entry per
// (Key, RunID, StepKey, Attempt).
type CacheEntry struct {
	// Key is the cache key: hex BLAKE3 of the canonical JSON of Parts.
	Key      string
	Tool     string
	StepID   string // the spec step's id
	Workflow string // the run's workflow name; may be ""
	RunID    string
	StepKey  string
	Attempt  int
	// Parts is what the key was made of, a JSON object (tool, version, args, env, extra), kept
	// so that `dcc-flow cache explain` can say which part differs.
	Parts    json.RawMessage
	Output   json.RawMessage // the attempt's output
	FileRefs json.RawMessage // its captured file_refs, or nil
	// CreatedAt is when the attempt completed; ExpiresAt when the entry stops being used
	// (cache ttl_secs), zero for never.
	CreatedAt time.Time
	ExpiresAt time.Time
	// Files are the file records of the attempt (by ID, ascending) as CacheEntries returns
	// them: what a lookup checks the files against. Ignored when writing; nil from ListCache.
	Files []FileRecord
}

// SortCache orders entries as the stores list them: newest CreatedAt first; for the same
// CreatedAt, by key, run, step and attempt.
func SortCache(es []CacheEntry) {
	slices.SortFunc(es, func(a, b CacheEntry) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.RunID, b.RunID), cmp.Compare(a.StepKey, b.StepKey),
			cmp.Compare(a.Attempt, b.Attempt))
	})
}

// CacheFilter selects cache entries; its zero value selects every one.
type CacheFilter struct {
	Key      string
	Tool     string
	Workflow string
	RunID    string
	// Before selects the entries created before it; zero = any.
	Before time.Time
	Limit  int // ≤ 0 = all (ListCache only)
}
