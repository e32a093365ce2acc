package sqlrow

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// CacheLookupColumns lists, in order, the columns of a row of a store's CacheEntries query,
// which selects a key's entries with the file records of each entry's attempt in one
// statement: the entry's columns (CacheColumns), then its records as the text of a JSON array
// with one array per record (CacheFileFields, in any order), or NULL for none, built by the
// database.
const CacheLookupColumns = CacheColumns + ", files"

// CacheFileFields lists, in order, the columns of file_records each array of the files column
// of a CacheEntries row holds: a record but the run, step and attempt (the entry's).
const CacheFileFields = "id, role, path, state, size, mod_time, dev, ino, hash, error, recorded_at, verified_at"

// CacheLookup reads a row of a CacheEntries query (CacheLookupColumns): the entry with its
// Files, by ID. A files column that is not such JSON is an error naming the entry.
func CacheLookup(sc Scanner) (store.CacheEntry, error) {
	var e store.CacheEntry
	var parts, output, fileRefs, files []byte
	var created, expires int64
	if err := sc.Scan(&e.Key, &e.Tool, &e.StepID, &e.Workflow, &e.RunID, &e.StepKey, &e.Attempt, &parts, &output,
		&fileRefs, &created, &expires, &files); err != nil {
		return e, err
	}
	e.Parts, e.Output, e.FileRefs = Raw(parts), Raw(output), Raw(fileRefs)
	e.CreatedAt, e.ExpiresAt = FromNanos(created), FromNanos(expires)
	if len(files) == 0 {
		return e, nil
	}
	var err error
	if e.Files, err = cacheFiles(files, e.RunID, e.StepKey, e.Attempt); err != nil {
		return e, fmt.Errorf("the file records of cache entry %s (step %s of run %s, attempt %d): %w", e.Key, e.StepKey, e.RunID, e.Attempt, err)
	}
	// By ID: a database that aggregates them in index order (SQLite, for no sorter) need not.
	slices.SortFunc(e.Files, func(a, b store.FileRecord) int { return cmp.Compare(a.ID, b.ID) })
	return e, nil
}

// cacheFiles decodes the files column of a CacheEntries row: a JSON array of arrays of the
// CacheFileFields. It is read here rather than by encoding/json, which is several times slower
// at it (a cache lookup reads one per entry) and would turn a path's bytes that are not UTF-8
// (a POSIX name may hold any) into U+FFFD: SQLite writes them into its JSON as they are.
func cacheFiles(b []byte, runID, stepKey string, attempt int) ([]store.FileRecord, error) {
	d := jsonDec{b: b}
	var out []store.FileRecord
	if err := d.expect('['); err != nil {
		return nil, err
	}
	if d.peek() == ']' {
		d.i++
		return out, d.end()
	}
	for {
		f := store.FileRecord{RunID: runID, StepKey: stepKey, Attempt: attempt}
		var role, state string
		var modTime, dev, ino, recorded, verified int64
		var hash, errText *string
		if err := d.expect('['); err != nil {
			return nil, err
		}
		for i, dst := range []any{&f.ID, &role, &f.Path, &state, &f.Size, &modTime, &dev, &ino, &hash, &errText, &recorded, &verified} {
			if i > 0 {
				if err := d.expect(','); err != nil {
					return nil, err
				}
			}
			if err := d.value(dst); err != nil {
				return nil, fmt.Errorf("field %d of record %d: %w", i+1, len(out)+1, err)
			}
		}
		if err := d.expect(']'); err != nil {
			return nil, err
		}
		f.Role, f.State = store.FileRole(role), store.FileState(state)
		f.ModTime, f.RecordedAt, f.VerifiedAt = FromNanos(modTime), FromNanos(recorded), FromNanos(verified)
		f.Dev, f.Ino = uint64(dev), uint64(ino)
		f.Hash, f.Error = deref(hash), deref(errText)
		out = append(out, f)
		d.space()
		if d.peek() == ']' {
			d.i++
			return out, d.end()
		}
		if err := d.expect(','); err != nil {
			return nil, err
		}
	}
}

// jsonDec reads the few JSON forms cacheFiles needs: arrays, integers, strings and null.
type jsonDec struct {
	b []byte
	i int
}

var errJSONEnd = errors.New("unexpected end of JSON")

func (d *jsonDec) space() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\n' || d.b[d.i] == '\t' || d.b[d.i] == '\r') {
		d.i++
	}
}

// peek returns the next byte after white space, 0 at the end.
func (d *jsonDec) peek() byte {
	d.space()
	if d.i == len(d.b) {
		return 0
	}
	return d.b[d.i]
}

func (d *jsonDec) expect(c byte) error {
	switch got := d.peek(); {
	case d.i == len(d.b):
		return errJSONEnd
	case got != c:
		return fmt.Errorf("%q at offset %d; want %q", got, d.i, c)
	}
	d.i++
	return nil
}

// end checks nothing but white space follows.
func (d *jsonDec) end() error {
	if d.peek(); d.i != len(d.b) {
		return fmt.Errorf("%q after the end at offset %d", d.b[d.i], d.i)
	}
	return nil
}

// value reads an integer into *int64 or *int, a string into *string, a string or null into
// **string.
func (d *jsonDec) value(dst any) error {
	c := d.peek()
	if c == 0 {
		return errJSONEnd
	}
	switch dst := dst.(type) {
	case *int64, *int:
		j := d.i
		if j < len(d.b) && d.b[j] == '-' {
			j++
		}
		for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
			j++
		}
		n, err := strconv.ParseInt(string(d.b[d.i:j]), 10, 64)
		if err != nil {
			return fmt.Errorf("an integer at offset %d: %w", d.i, err)
		}
		d.i = j
		if p, ok := dst.(*int64); ok {
			*p = n
		} else {
			*dst.(*int) = int(n)
		}
		return nil
	case **string:
		if c == 'n' {
			if len(d.b)-d.i < 4 || string(d.b[d.i:d.i+4]) != "null" {
				return fmt.Errorf("%q at offset %d; want a string or null", c, d.i)
			}
			d.i += 4
			*dst = nil
			return nil
		}
		s, err := d.str()
		*dst = &s
		return err
	case *string:
		s, err := d.str()
		*dst = s
		return err
	}
	return fmt.Errorf("no JSON decoding into %T", dst)
}

// str reads a string, its escapes decoded and its other bytes kept as they are.
func (d *jsonDec) str() (string, error) {
	if d.peek() != '"' {
		return "", fmt.Errorf("%q at offset %d; want a string", d.peek(), d.i)
	}
	d.i++
	start := d.i
	for d.i < len(d.b) && d.b[d.i] != '"' && d.b[d.i] != '\\' {
		d.i++
	}
	if d.i < len(d.b) && d.b[d.i] == '"' { // no escapes: the common case
		s := string(d.b[start:d.i])
		d.i++
		return s, nil
	}
	buf := append([]byte(nil), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return string(buf), nil
		case c != '\\':
			buf = append(buf, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			return "", errJSONEnd
		}
		e := d.b[d.i+1]
		d.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, err := d.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
					d.i += 2
					if r2, err = d.hex4(); err != nil {
						return "", err
					}
				}
				r = utf16.DecodeRune(r, r2) // U+FFFD for a lone half, as encoding/json
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", fmt.Errorf("escape \\%c at offset %d", e, d.i-2)
		}
	}
	return "", errJSONEnd
}

func (d *jsonDec) hex4() (rune, error) {
	if len(d.b)-d.i < 4 {
		return 0, errJSONEnd
	}
	n, err := strconv.ParseUint(string(d.b[d.i:d.i+4]), 16, 16)
	if err != nil {
		return 0, fmt.Errorf("escape \\u%s at offset %d", d.b[d.i:d.i+4], d.i-2)
	}
	d.i += 4
	return rune(n), nil
}
