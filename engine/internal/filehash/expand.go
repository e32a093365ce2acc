package filehash

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
)

// DefaultMaxFiles is the number of paths Expand returns at most when its limit is ≤ 0 (the
// setting max_files_per_step).
const DefaultMaxFiles = 10000

// LimitError is Expand's error when the patterns match more than Limit paths.
type LimitError struct {
	Limit   int
	Pattern string // the pattern whose matches went past Limit
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("more than %d files (passed at the pattern %q): narrow the patterns, or raise the setting max_files_per_step", e.Limit, e.Pattern)
}

// Expand turns patterns into paths: each is relative to base (base "" = the current directory) or
// absolute, and is cleaned with base (Clean); on Windows `\lib\a.usd` is on base's drive or share,
// and `C:a.usd` (relative to a drive's current directory) is an error. A pattern without glob
// characters is returned as it is, cleaned, whether or not the file exists (an output yet to be
// written). A glob matches each path segment with filepath.Match (`*`, `?`, `[a-z]`; `\` escapes
// but on Windows, where it separates) and `**` as a whole segment matches any number of
// directories, none included ("a/**/*.usd" matches a/x.usd and a/b/c/x.usd; "a/**" every file
// under a). Globs match names exactly (case matters, on Windows too) and `*` matches names
// starting with a dot. A glob returns what exists and is not a directory (a dangling symlink
// included, so that it is recorded missing); it neither returns nor descends into a directory
// reached through a symlink (base and the literal directories before a pattern's first glob are
// followed), so a symlink loop ends; directories that cannot be read are skipped. The result is
// cleaned, deduplicated and sorted (by bytes). More than limit paths in all (limit ≤ 0:
// DefaultMaxFiles) is a *LimitError, returned as soon as the walk finds one too many; a malformed
// pattern is an error naming it. Expand walks until done: ExpandContext stops when a context ends.
func Expand(base string, patterns []string, limit int) ([]string, error) {
	return ExpandContext(context.Background(), base, patterns, limit)
}

// ExpandContext is Expand, checking ctx before each directory it reads: when ctx ends it returns
// context.Cause(ctx) (a walk of a huge tree, "/**/x.usd", finds few matches but reads every
// directory, which the limit does not bound).
func ExpandContext(ctx context.Context, base string, patterns []string, limit int) ([]string, error) {
	return expandFor(ctx, runtime.GOOS, base, patterns, limit, os.Getwd)
}

func expandFor(ctx context.Context, goos, base string, patterns []string, limit int, cwd func() (string, error)) ([]string, error) {
	if limit <= 0 {
		limit = DefaultMaxFiles
	}
	sep := "/"
	if goos == "windows" {
		sep = `\`
	}
	if base == "" {
		base = "."
	}
	base, err := cleanFor(goos, base, cwd)
	if err != nil {
		return nil, err
	}
	e := &expander{ctx: ctx, goos: goos, sep: sep, limit: limit, seen: map[string]bool{}, visited: map[visit]bool{}}
	for _, pat := range patterns {
		full, i, err := resolvePattern(goos, sep, base, pat, cwd)
		if err != nil {
			return nil, err
		}
		e.pattern = pat
		// The literal directory the walk starts from, then the segments to match. The segments
		// of base are literal even with glob characters in their names ("/show/[old]").
		vol, segs := splitSegs(goos, full)
		for i < len(segs) && !hasMeta(goos, segs[i]) {
			i++
		}
		if i == len(segs) { // no glob: the path itself, there or not
			if err := e.add(full); err != nil {
				return nil, err
			}
			continue
		}
		dir := vol + strings.Join(segs[:i], sep)
		var pats []string // consecutive ** collapsed: they match what one does
		for _, s := range segs[i:] {
			if s == "**" && len(pats) > 0 && pats[len(pats)-1] == "**" {
				continue
			}
			if s != "**" {
				if _, err := filepath.Match(unescapeWin(goos, s), ""); err != nil {
					return nil, fmt.Errorf("pattern %q: the segment %q is malformed (%v): close its [ ] or escape the character", pat, s, err)
				}
			}
			pats = append(pats, s)
		}
		e.pats = pats
		if err := e.walk(dir, 0); err != nil {
			return nil, err
		}
	}
	out := make([]string, 0, len(e.seen))
	for p := range e.seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

type visit struct {
	dir string
	i   int
}

type expander struct {
	ctx       context.Context
	goos, sep string
	limit     int
	pattern   string   // the pattern being expanded (for LimitError)
	pats      []string // its segments left to match, from the walk's start
	seen      map[string]bool
	visited   map[visit]bool // (directory, segment) pairs walked, for this pattern
}

func (e *expander) add(p string) error {
	if e.seen[p] {
		return nil
	}
	if len(e.seen) >= e.limit {
		return &LimitError{Limit: e.limit, Pattern: e.pattern}
	}
	e.seen[p] = true
	return nil
}

// walk matches e.pats[i:] in dir, a real directory (not reached through a symlink).
func (e *expander) walk(dir string, i int) error {
	v := visit{dir + "\x00" + e.pattern, i}
	if e.visited[v] {
		return nil
	}
	e.visited[v] = true
	seg := e.pats[i]
	last := i == len(e.pats)-1
	if seg == "**" {
		if last { // "a/**": every file under dir, at any depth
			return e.walkAll(dir)
		}
		if err := e.walk(dir, i+1); err != nil { // ** as no directory
			return err
		}
	}
	return e.eachEntry(dir, func(ent fs.DirEntry) error {
		name := ent.Name()
		p := join(dir, name, e.sep)
		if seg == "**" {
			if ent.IsDir() { // a real directory; a symlink's Type is ModeSymlink
				return e.walk(p, i)
			}
			return nil
		}
		if ok, _ := filepath.Match(unescapeWin(e.goos, seg), name); !ok {
			return nil
		}
		if !last {
			if ent.IsDir() {
				return e.walk(p, i+1)
			}
			return nil
		}
		if fileLike(p, ent) {
			return e.add(p)
		}
		return nil
	})
}

// walkAll adds every file under dir, at any depth, not following symlinked directories.
func (e *expander) walkAll(dir string) error {
	return e.eachEntry(dir, func(ent fs.DirEntry) error {
		p := join(dir, ent.Name(), e.sep)
		if ent.IsDir() {
			return e.walkAll(p)
		}
		if fileLike(p, ent) {
			return e.add(p)
		}
		return nil
	})
}

// eachEntry calls fn with each entry of dir, in directory order, read 1,024 at a time (so that
// a huge directory costs memory only up to the limit), and returns fn's first error, or the
// cause of e.ctx's end. A directory that is not there or cannot be read has no entries.
func (e *expander) eachEntry(dir string, fn func(fs.DirEntry) error) error {
	if e.ctx.Err() != nil {
		return context.Cause(e.ctx)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(1024)
		for _, ent := range ents {
			if err := fn(ent); err != nil {
				return err
			}
		}
		if err != nil || len(ents) == 0 {
			return nil
		}
	}
}

// fileLike reports whether ent, at p, is something Expand returns: anything but a directory or
// a symlink to one.
func fileLike(p string, ent fs.DirEntry) bool {
	if ent.IsDir() {
		return false
	}
	if ent.Type()&fs.ModeSymlink != 0 {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			return false
		}
	}
	return true
}

// splitSegs splits a cleaned absolute path into its root ("/", `C:\`, `\\srv\share\`) and its
// segments.
func splitSegs(goos, p string) (root string, segs []string) {
	sep, rest := "/", strings.TrimPrefix(p, "/")
	root = "/"
	if goos == "windows" {
		v, r, _ := splitWindows(p)
		sep, root, rest = `\`, v+`\`, strings.TrimPrefix(r, `\`)
	}
	if rest == "" {
		return root, nil
	}
	return root, strings.Split(rest, sep)
}

func join(dir, name, sep string) string {
	if strings.HasSuffix(dir, sep) {
		return dir + name
	}
	return dir + sep + name
}

func isAbs(goos, p string) bool {
	if goos != "windows" {
		return strings.HasPrefix(p, "/")
	}
	p = strings.ReplaceAll(p, "/", `\`)
	return isDriveAbs(p) || strings.HasPrefix(p, `\\`)
}

// resolvePattern is pat as Expand reads it against base (absolute and cleaned): full, absolute
// and cleaned, and how many of its leading segments are base's, which are literal even with
// glob characters in their names.
func resolvePattern(goos, sep, base, pat string, cwd func() (string, error)) (full string, baseSegs int, err error) {
	if pat == "" {
		return "", 0, fmt.Errorf("an empty pattern: name a file or a glob (relative to %s)", base)
	}
	joined := pat
	if !isAbs(goos, pat) {
		joined = base + sep + pat
		if goos == "windows" {
			q := strings.ReplaceAll(pat, "/", `\`)
			bvol, _, _ := splitWindows(base)
			switch {
			case len(q) >= 2 && q[1] == ':' && isLetter(q[0]): // C:a.usd
				return "", 0, fmt.Errorf("pattern %q is relative to the current directory of drive %s: write it relative to %s, or from the root (%s\\…)", pat, strings.ToUpper(q[:1]), base, strings.ToUpper(q[:2]))
			case strings.HasPrefix(q, `\`): // \show\a.usd: the root of base's drive or share
				joined = bvol + q
			}
		}
	}
	full, err = cleanFor(goos, joined, cwd)
	if err != nil {
		return "", 0, fmt.Errorf("pattern %q: %w", pat, err)
	}
	if !isAbs(goos, pat) {
		vol, segs := splitSegs(goos, full)
		if bvol, bsegs := splitSegs(goos, base); bvol == vol {
			for baseSegs < len(bsegs) && baseSegs < len(segs) && segs[baseSegs] == bsegs[baseSegs] {
				baseSegs++
			}
		}
	}
	return full, baseSegs, nil
}

// HasGlob reports whether pattern has glob characters (Expand's: `*`, `?`, `[`, and `\`, an
// escape, but on Windows): one without names one path.
func HasGlob(pattern string) bool { return hasMeta(runtime.GOOS, pattern) }

// AbsPattern is pattern as Expand(base, …) reads it, made absolute: cleaned with base (base "" =
// the current directory), the glob characters in the names of base's segments escaped, so that
// Expand of it with any base matches what Expand(base, pattern) does ("/show/[old]" and
// "*.usd" make `/show/\[old]/*.usd`; on Windows `C:\show\[[]old]\*.usd`). Its errors are
// Expand's for the pattern.
func AbsPattern(base, pattern string) (string, error) {
	return absPatternFor(runtime.GOOS, base, pattern, os.Getwd)
}

func absPatternFor(goos, base, pattern string, cwd func() (string, error)) (string, error) {
	sep := "/"
	if goos == "windows" {
		sep = `\`
	}
	if base == "" {
		base = "."
	}
	base, err := cleanFor(goos, base, cwd)
	if err != nil {
		return "", err
	}
	full, n, err := resolvePattern(goos, sep, base, pattern, cwd)
	if err != nil {
		return "", err
	}
	vol, segs := splitSegs(goos, full)
	for k := range n {
		segs[k] = quoteMeta(goos, segs[k])
	}
	return vol + strings.Join(segs, sep), nil
}

// quoteMeta escapes the glob characters of a name so that a pattern segment of it matches it
// alone: `\` before each on POSIX; on Windows, where `\` separates, each in brackets ("[[]").
func quoteMeta(goos, name string) string {
	if !hasMeta(goos, name) {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		switch {
		case goos == "windows" && strings.ContainsRune("*?[", r):
			b.WriteByte('[')
			b.WriteRune(r)
			b.WriteByte(']')
		case goos != "windows" && strings.ContainsRune(`*?[\`, r):
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// hasMeta reports whether p has glob characters (`\` is one, an escape, but on Windows).
func hasMeta(goos, p string) bool {
	magic := `*?[\`
	if goos == "windows" {
		magic = `*?[`
	}
	return strings.ContainsAny(p, magic)
}

// unescapeWin makes a Windows pattern segment, where `\` is no escape, safe for filepath.Match
// on any OS (segments never contain the separator, so this only matters when testing the
// Windows form elsewhere).
func unescapeWin(goos, seg string) string {
	if goos == "windows" && runtime.GOOS != "windows" {
		return strings.ReplaceAll(seg, `\`, `\\`)
	}
	return seg
}
