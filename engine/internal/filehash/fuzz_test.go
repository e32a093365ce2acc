package filehash

import (
	"strings"
	"testing"
)

// FuzzCleanFor: for any input, in both forms, cleanFor does not panic, and what it returns is
// absolute, cleaned once and for all (cleaning it again changes nothing), under its own root, and
// Under itself; underFor does not panic.
func FuzzCleanFor(f *testing.F) {
	for _, s := range []string{"", "a", "/a/../b", `c:\x`, `C:/mixed\slashes`, `\\server\share\dir\f.usd`,
		`//srv/share/..`, `\\?\UNC\s\sh\x`, `\\?\c:\long`, `\\.\COM1`, `\\server`, "c:", `C:..\..\x`,
		"\x00", "//x//y/./..", `\\\\`, `\\a\\b`, "ä/ö"} {
		f.Add(s, "/a/b")
	}
	f.Fuzz(func(t *testing.T, p, dir string) {
		for _, goos := range []string{"windows", "linux"} {
			cwd := wd("/work")
			if goos == "windows" {
				cwd = wd(`C:\work`)
			}
			got, err := cleanFor(goos, p, cwd)
			underFor(goos, p, dir, cwd)
			if err != nil {
				continue
			}
			again, err := cleanFor(goos, got, cwd)
			if err != nil || again != got {
				t.Fatalf("%s: cleanFor(%q) = %q, again %q, %v", goos, p, got, again, err)
			}
			if !isAbs(goos, got) {
				t.Fatalf("%s: cleanFor(%q) = %q, not absolute", goos, p, got)
			}
			if goos == "windows" {
				if strings.Contains(got, "/") {
					t.Fatalf("windows: cleanFor(%q) = %q has a slash", p, got)
				}
			}
			root, segs := splitSegs(goos, got)
			for _, s := range segs {
				if s == "" || s == "." || s == ".." {
					t.Fatalf("%s: cleanFor(%q) = %q has the segment %q", goos, p, got, s)
				}
			}
			if !underFor(goos, got, got, cwd) || !underFor(goos, got, root, cwd) {
				t.Fatalf("%s: %q is not under itself or its root %q", goos, got, root)
			}
		}
	})
}
