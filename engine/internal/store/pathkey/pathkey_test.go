package pathkey

import "testing"

func TestWindows(t *testing.T) {
	for p, want := range map[string]bool{
		`C:\show\a.usd`: true, "c:/show": true, "C:": true, `\\server\share\a`: true, `\\`: true,
		"/mnt/show": false, "": false, "C": false, "1:/x": false, `\x`: false, "/C:/x": false, "é:/x": false,
	} {
		if got := Windows(p); got != want {
			t.Errorf("Windows(%q) = %v; want %v", p, got, want)
		}
	}
}

func TestKey(t *testing.T) {
	for p, want := range map[string]string{
		"/mnt/Show/A.usd":       "/mnt/Show/A.usd", // POSIX: as is
		`c:\Show/a.usd`:         `C:\SHOW\A.USD`,
		`\\farm\Share\shot.exr`: `\\FARM\SHARE\SHOT.EXR`,
		`C:\Über\straße\ǆ`:      `C:\ÜBER\STRAßE\Ǆ`, // ß has no one-rune upper case
		"C:\\bad\xff\xfeé":      "C:\\BAD\xff\xfeÉ", // non-UTF-8 bytes kept
	} {
		if got := Key(p); got != want {
			t.Errorf("Key(%q) = %q; want %q", p, got, want)
		}
	}
}

func TestUnder(t *testing.T) {
	for _, c := range []struct {
		path, dir string
		want      bool
	}{
		{"/a/b", "/a/b", true},
		{"/a/b/c", "/a/b", true},
		{"/a/b/c/d.usd", "/a/b", true},
		{"/a/bc", "/a/b", false},
		{"/a/b.txt", "/a/b", false}, // '.' sorts before '/'
		{"/a/b!/x", "/a/b", false},
		{"/a/b/\U0001F600", "/a/b", true}, // beyond U+FFFF: still inside
		{"/a/b0", "/a/b", false},          // '0' is the range's end
		{"/a/B/c", "/a/b", false},         // POSIX tells case apart
		{"/a/b/c", "/a/b/", true},         // a trailing separator is ignored
		{"/a/b", "/a/b/", true},
		{"/a", "/", true},
		{"/", "/", true},
		{`C:\a`, "/", false},
		{`C:\Show\a.usd`, `c:\show`, true}, // Windows: case-insensitive
		{`C:\SHOW`, `c:/show`, true},
		{`C:/show/x`, `C:\Show`, true},
		{`C:\showx\a`, `C:\show`, false},
		{`C:\show.bak\a`, `C:\show`, false},
		{`D:\show\a`, `C:\show`, false},
		{`C:\show\a`, `C:\`, true},
		{`C:\show\a`, `C:`, true},
		{`\\srv\share\a.exr`, `\\SRV\Share`, true},
		{`\\srv\share2\a.exr`, `\\srv\share`, false},
		{`\\srv\share\a.exr`, `\\`, true},
		{`C:\a`, `\\`, false},
		{"/a/b", "", false},
	} {
		if got := Under(c.path, c.dir); got != c.want {
			t.Errorf("Under(%q, %q) = %v; want %v", c.path, c.dir, got, c.want)
		}
	}
}
