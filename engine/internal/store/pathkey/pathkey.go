// Package pathkey is how the stores compare the paths of file records (store.FileRecord.Path)
// for store.FileFilter.Under: each record keeps, beside its path, the path's key (Key), and a
// directory selects the keys in a range (Range), which an index answers.
//
// A path is in Windows form when it starts with a drive letter and a colon (`C:\show\a.usd`)
// or with two backslashes (a UNC path, `\\server\share\a.usd`); any other path is in POSIX
// form (`/mnt/show/a.usd`). A POSIX path's key is the path itself: POSIX file systems tell
// case apart, and the separator is '/'. A Windows path's key has every '/' turned into '\' and
// every letter upper-cased, so that `c:/Show/A.usd` and `C:\SHOW\a.usd`, one file on Windows,
// have one key. Upper-casing is Unicode's simple mapping, one rune for one
// (unicode.ToUpper): what NTFS's upcase table does for names, give or take the characters
// whose mapping changed between Unicode versions; bytes that are not UTF-8 are kept as they
// are.
//
// Keys compare byte by byte (SQLite's BINARY collation, PostgreSQL's "C"): a directory's range
// is [dir+sep, dir+sep+1), sep+1 being the byte after the separator ('0' after '/', ']' after
// '\'), which holds every key that starts with dir+sep and no other, whatever follows. So
// /a/bc is not under /a/b, and neither is /a/b.txt, whose '.' sorts before '/'.
package pathkey

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Windows reports whether p is in Windows form: an ASCII letter and a colon first ("C:",
// `C:\x`, "c:/x"), or two backslashes (`\\server\share`).
func Windows(p string) bool {
	if strings.HasPrefix(p, `\\`) {
		return true
	}
	return len(p) >= 2 && p[1] == ':' && ('a' <= p[0] && p[0] <= 'z' || 'A' <= p[0] && p[0] <= 'Z')
}

// Sep returns the separator of p's form: '\' for a Windows-form path, else '/'.
func Sep(p string) byte {
	if Windows(p) {
		return '\\'
	}
	return '/'
}

// Key returns the key of p: p itself when it is in POSIX form; in Windows form, p with '/'
// turned into '\' and its letters upper-cased (see the package comment).
func Key(p string) string {
	if !Windows(p) {
		return p
	}
	ascii := true
	for i := 0; i < len(p); i++ {
		if p[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	var b strings.Builder
	b.Grow(len(p))
	if ascii {
		for i := 0; i < len(p); i++ {
			c := p[i]
			switch {
			case c == '/':
				c = '\\'
			case 'a' <= c && c <= 'z':
				c -= 'a' - 'A'
			}
			b.WriteByte(c)
		}
		return b.String()
	}
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRuneInString(p[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteByte(p[i]) // not UTF-8: kept as is
		case r == '/':
			b.WriteByte('\\')
		default:
			b.WriteRune(unicode.ToUpper(r))
		}
		i += n
	}
	return b.String()
}

// Range returns the keys of the paths under dir, dir itself included: a path is under dir when
// its key equals exact or lies in [lo, hi) byte-wise. A trailing separator of dir is ignored
// ("/a/b/" is "/a/b"), but for a root: "/" holds every POSIX-form path, `C:\` (or "C:") every
// path of drive C. dir should be clean (absolute, no "." or ".." parts): keys are compared,
// not resolved.
func Range(dir string) (exact, lo, hi string) {
	k := Key(dir)
	sep := Sep(dir)
	trimmed := strings.TrimRight(k, string(sep))
	if Windows(dir) && strings.HasPrefix(k, `\\`) && len(trimmed) == 0 {
		return k, `\\`, `\]` // `\\` alone: every UNC path
	}
	exact = trimmed
	if trimmed == "" || Windows(dir) && len(trimmed) == 2 && trimmed[1] == ':' {
		exact = k // a root: "/", `C:\` or "C:"
	}
	lo = trimmed + string(sep)
	hi = trimmed + string(sep+1)
	return exact, lo, hi
}

// Under reports whether path is dir or inside it, by their keys (Range). dir "" holds nothing.
func Under(path, dir string) bool {
	if dir == "" {
		return false
	}
	exact, lo, hi := Range(dir)
	k := Key(path)
	return k == exact || lo <= k && k < hi
}
