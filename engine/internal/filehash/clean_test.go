package filehash

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func wd(dir string) func() (string, error) {
	return func() (string, error) { return dir, nil }
}

func TestRedteamCleanWindowsUNCAndPOSIX(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		goos, cwd, in, want string
	}{
		// Windows: drives.
		{"windows", `C:\work`, `c:\x`, `C:\x`},
		{"windows", `C:\work`, `C:/mixed\slashes/a.usd`, `C:\mixed\slashes\a.usd`},
		{"windows", `C:\work`, `c:\show\.\seq\..\a.usd`, `C:\show\a.usd`},
		{"windows", `C:\work`, `C:\..\..\a.usd`, `C:\a.usd`},
		{"windows", `C:\work`, `C:\show\dir\`, `C:\show\dir`},
		{"windows", `C:\work`, `C:\\show\\\a.usd`, `C:\show\a.usd`},
		{"windows", `C:\work`, `C:\`, `C:\`},
		{"windows", `C:\work`, `c:/`, `C:\`},
		{"windows", `C:\work`, `C:\Show\A.USD`, `C:\Show\A.USD`}, // case kept but the drive's
		// Windows: UNC shares.
		{"windows", `C:\work`, `\\server\share\dir\f.usd`, `\\server\share\dir\f.usd`},
		{"windows", `C:\work`, `//server/share/dir/../f.usd`, `\\server\share\f.usd`},
		{"windows", `C:\work`, `\\server\share`, `\\server\share\`},
		{"windows", `C:\work`, `\\server\share\..\..\f.usd`, `\\server\share\f.usd`},
		{"windows", `C:\work`, `\\Server\Share\f.usd`, `\\Server\Share\f.usd`},
		// Windows: long-path prefixes dropped.
		{"windows", `C:\work`, `\\?\c:\long\a.usd`, `C:\long\a.usd`},
		{"windows", `C:\work`, `\\?\UNC\server\share\a.usd`, `\\server\share\a.usd`},
		// Windows: relative paths.
		{"windows", `C:\work`, `a.usd`, `C:\work\a.usd`},
		{"windows", `c:\work`, `..\b\a.usd`, `C:\b\a.usd`},
		{"windows", `C:\work`, `\root.usd`, `C:\root.usd`},
		{"windows", `C:\work`, `c:rel.usd`, `C:\work\rel.usd`},
		{"windows", `\\srv\proj\shots`, `a.usd`, `\\srv\proj\shots\a.usd`},
		{"windows", `\\srv\proj\shots`, `\a.usd`, `\\srv\proj\a.usd`},
		// POSIX.
		{"linux", "/work", "/mnt/show/a.usd", "/mnt/show/a.usd"},
		{"linux", "/work", "a/../b/", "/work/b"},
		{"linux", "/work", "//x//y", "/x/y"},
		{"linux", "/work", "/../..", "/"},
		{"linux", "/work", ".", "/work"},
		{"linux", "/work", `C:\x`, `/work/C:\x`}, // a backslash is a name's character on POSIX
		{"darwin", "/Users/a", "b.usd", "/Users/a/b.usd"},
	} {
		got, err := cleanFor(tc.goos, tc.in, wd(tc.cwd))
		if err != nil || got != tc.want {
			t.Errorf("cleanFor(%s, %q) in %q = %q, %v; want %q", tc.goos, tc.in, tc.cwd, got, err, tc.want)
		}
		// Cleaning is idempotent.
		if again, err := cleanFor(tc.goos, got, wd(tc.cwd)); err != nil || again != got {
			t.Errorf("cleanFor(%s, %q) again = %q, %v", tc.goos, got, again, err)
		}
	}
}

func TestRedteamCleanBadPaths(t *testing.T) {
	t.Parallel()
	noCwd := func() (string, error) { return "", errors.New("gone") }
	for _, tc := range []struct {
		goos, in string
		cwd      func() (string, error)
		want     string // in the message
	}{
		{"linux", "", wd("/w"), "empty path"},
		{"windows", "", wd(`C:\w`), "empty path"},
		{"linux", "a\x00b", wd("/w"), "NUL"},
		{"windows", `\\.\COM1`, wd(`C:\w`), "device path"},
		{"windows", `\\?\Volume{x}\a`, wd(`C:\w`), "device path"},
		{"windows", `\\server`, wd(`C:\w`), `\\server\share`},
		{"windows", `\\server\`, wd(`C:\w`), `\\server\share`},
		{"windows", `d:rel.usd`, wd(`C:\w`), `write it as D:\`},
		{"windows", `rel.usd`, noCwd, "give an absolute path"},
		{"linux", "rel.usd", noCwd, "give an absolute path"},
	} {
		got, err := cleanFor(tc.goos, tc.in, tc.cwd)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cleanFor(%s, %q) = %q, %v; want an error with %q", tc.goos, tc.in, got, err, tc.want)
		}
	}
}

func TestRedteamUnderWindowsUNCAndPOSIX(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		goos, path, dir string
		want            bool
	}{
		{"linux", "/a/b", "/a/b", true},
		{"linux", "/a/b/c", "/a/b", true},
		{"linux", "/a/b/c", "/a/b/", true},
		{"linux", "/a/bc", "/a/b", false},
		{"linux", "/a", "/a/b", false},
		{"linux", "/a/b", "/", true},
		{"linux", "/A/b", "/a", false},
		{"linux", "/a/x/../b/c", "/a/b", true},
		{"linux", "", "/a", false},
		{"windows", `C:\show\a.usd`, `C:\show`, true},
		{"windows", `c:\Show\A.usd`, `C:\SHOW`, true},
		{"windows", `C:\showx\a.usd`, `C:\show`, false},
		{"windows", `C:\show\a.usd`, `C:\`, true},
		{"windows", `D:\show\a.usd`, `C:\`, false},
		{"windows", `C:/show/a.usd`, `c:\show\`, true},
		{"windows", `\\server\share\dir\f.usd`, `\\server\share`, true},
		{"windows", `\\server\share\dir\f.usd`, `\\SERVER\Share\Dir`, true},
		{"windows", `\\server\share2\f.usd`, `\\server\share`, false},
		{"windows", `\\server\share\f.usd`, `C:\`, false},
		{"windows", `\\.\COM1`, `C:\`, false},
	} {
		if got := underFor(tc.goos, tc.path, tc.dir, wd("/w")); got != tc.want {
			t.Errorf("underFor(%s, %q, %q) = %v, want %v", tc.goos, tc.path, tc.dir, got, tc.want)
		}
	}
}

func TestCleanAndUnderOnThisOS(t *testing.T) {
	t.Parallel()
	if _, err := Clean(""); err == nil {
		t.Error("Clean(\"\"): no error")
	}
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Clean("a/../b")
	if want := filepath.Join(cwd, "b"); err != nil || got != want {
		t.Errorf("Clean(a/../b) = %q, %v; want %q", got, err, want)
	}
	if runtime.GOOS != "windows" {
		if !Under("/a/b/c", "/a/b") || Under("/a/bc", "/a/b") {
			t.Error("Under by string prefix")
		}
	}
}
