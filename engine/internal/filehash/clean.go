// Package filehash hashes the files steps read and write, and tells an unchanged file without
// reading it again (docs/design/filehash.md).
//
// Paths are recorded in one form per OS (Clean): absolute, cleaned, drive letters upper-cased
// on Windows. A file is hashed with BLAKE3, streamed through a fixed buffer (HashFile); it is
// stat'ed before and after, and a file that moved meanwhile is unstable, never hashed. A file
// whose size, modification time, device and inode are those recorded is taken as unchanged
// without reading it (Recheck), as git's index does. Expand turns the globs of a step into
// paths, with a limit on how many.
//
// The package is a leaf: it imports the standard library and github.com/zeebo/blake3 only.
package filehash

import (
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"strings"
)

// Clean returns path absolute and cleaned, in the form of the OS it runs on, the form file
// records are stored and compared in:
//
//   - POSIX: filepath.Abs then Clean: "a/../b/" → "<cwd>/b", "//x//y" → "/x/y".
//   - Windows: forward slashes become backslashes, the drive letter is upper-cased
//     (`c:/show\a.usd` → `C:\show\a.usd`), "." and ".." are resolved (never above the drive or
//     share root), a UNC share keeps its server and share (`//srv/share/a/../b.usd` →
//     `\\srv\share\b.usd`; the share root is `\\srv\share\`), the long-path prefixes
//     `\\?\C:\…` and `\\?\UNC\srv\share\…` are dropped, and a relative path (`a.usd`, `\a.usd`,
//     `C:a.usd` on the current directory's drive) is made absolute against the current
//     directory. The case of the rest is kept.
//
// An empty path, a path with a NUL byte, a Windows device path (`\\.\COM1`), a UNC path without
// a share (`\\srv`) and `C:a.usd` on another drive than the current directory's are errors that
// name the path. Clean does not touch the file system but to read the current directory of a
// relative path.
func Clean(path string) (string, error) {
	return cleanFor(runtime.GOOS, path, os.Getwd)
}

// Under reports whether path is dir or inside it, by whole path segments: "/a/b/c" is under
// "/a/b" and "/a/b", but "/a/bc" is not. Both are cleaned first (Clean; a path that cannot be
// cleaned is under nothing). On Windows the comparison ignores case (`c:\Show\A.usd` is under
// `C:\show`); elsewhere it is exact.
func Under(path, dir string) bool {
	return underFor(runtime.GOOS, path, dir, os.Getwd)
}

// cleanFor is Clean for goos ("windows" or any other: POSIX), with cwd giving the current
// directory (only called for a relative path), so that both forms are tested on any OS.
func cleanFor(goos, p string, cwd func() (string, error)) (string, error) {
	if p == "" {
		return "", errors.New("empty path: name a file")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte: remove it", p)
	}
	if goos == "windows" {
		return cleanWindows(p, cwd)
	}
	if !strings.HasPrefix(p, "/") {
		wd, err := cwd()
		if err != nil {
			return "", fmt.Errorf("%s is relative and the current directory is unknown (%v): give an absolute path", p, err)
		}
		p = wd + "/" + p
	}
	return path.Clean(p), nil
}

// cleanWindows is cleanFor for Windows paths.
func cleanWindows(p string, cwd func() (string, error)) (string, error) {
	orig := p
	p = strings.ReplaceAll(p, "/", `\`)
	// The long-path and device prefixes.
	switch {
	case hasPrefixFold(p, `\\?\UNC\`):
		p = `\\` + p[len(`\\?\UNC\`):]
	case strings.HasPrefix(p, `\\?\`) && isDriveAbs(p[4:]):
		p = p[4:]
	case strings.HasPrefix(p, `\\?\`), strings.HasPrefix(p, `\\.\`), strings.HasPrefix(p, `\??\`):
		return "", fmt.Errorf("%s is a Windows device path: name a file on a drive (C:\\…) or a share (\\\\server\\share\\…)", orig)
	}
	vol, rest, err := splitWindows(p)
	if err != nil {
		return "", fmt.Errorf("%s: %v", orig, err)
	}
	switch {
	case vol == "" || (len(vol) == 2 && !strings.HasPrefix(rest, `\`)):
		// `a.usd`, `\a.usd` or `C:a.usd`: relative to the current directory (its drive).
		wd, err := cwd()
		if err != nil {
			return "", fmt.Errorf("%s is relative and the current directory is unknown (%v): give an absolute path such as C:\\show\\a.usd", orig, err)
		}
		wvol, wrest, err := splitWindows(strings.ReplaceAll(wd, "/", `\`))
		if err != nil || wvol == "" {
			return "", fmt.Errorf("%s is relative and the current directory %s has no drive or share: give an absolute path", orig, wd)
		}
		switch {
		case vol != "" && !strings.EqualFold(vol, wvol):
			return "", fmt.Errorf("%s is relative to drive %s, not the current directory's (%s): write it as %s\\…", orig, strings.ToUpper(vol), wvol, strings.ToUpper(vol))
		case strings.HasPrefix(rest, `\`): // `\a.usd`: the root of the current drive
			vol = wvol
		default:
			vol, rest = wvol, wrest+`\`+rest
		}
	}
	if len(vol) == 2 {
		vol = strings.ToUpper(vol[:1]) + ":"
	}
	// Resolve the segments: "." goes, ".." removes one, never above the root.
	var segs []string
	for _, s := range strings.Split(rest, `\`) {
		switch s {
		case "", ".":
		case "..":
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
		default:
			segs = append(segs, s)
		}
	}
	return vol + `\` + strings.Join(segs, `\`), nil
}

// splitWindows splits a backslashed path into its volume ("C:", `\\srv\share` or "") and the
// rest.
func splitWindows(p string) (vol, rest string, err error) {
	if len(p) >= 2 && p[1] == ':' && isLetter(p[0]) {
		return p[:2], p[2:], nil
	}
	if strings.HasPrefix(p, `\\`) {
		parts := strings.SplitN(p[2:], `\`, 3)
		if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
			return "", "", errors.New(`a UNC path needs a server and a share: write \\server\share\…`)
		}
		vol = `\\` + parts[0] + `\` + parts[1]
		if len(parts) == 3 {
			rest = `\` + parts[2]
		}
		return vol, rest, nil
	}
	return "", p, nil
}

func isDriveAbs(p string) bool {
	return len(p) >= 3 && isLetter(p[0]) && p[1] == ':' && p[2] == '\\'
}

func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// underFor is Under for goos.
func underFor(goos, p, dir string, cwd func() (string, error)) bool {
	p, err := cleanFor(goos, p, cwd)
	if err != nil {
		return false
	}
	dir, err = cleanFor(goos, dir, cwd)
	if err != nil {
		return false
	}
	sep := "/"
	eq := func(a, b string) bool { return a == b }
	if goos == "windows" {
		sep, eq = `\`, strings.EqualFold
	}
	ps := strings.Split(strings.TrimSuffix(p, sep), sep)
	ds := strings.Split(strings.TrimSuffix(dir, sep), sep)
	if len(ps) < len(ds) {
		return false
	}
	for i := range ds {
		if !eq(ps[i], ds[i]) {
			return false
		}
	}
	return true
}
