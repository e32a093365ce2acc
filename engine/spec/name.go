package spec

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen is the most characters (Unicode code points) a workflow name may have.
const MaxNameLen = 64

// NameProblem says why name is not a valid workflow name, or returns "" when it is valid.
//
// A name is 0 to MaxNameLen characters of valid UTF-8 — letters of any script, digits, spaces and
// punctuation — with no control character (C0, DEL, C1: a newline, an escape, NUL), no line or
// paragraph separator (U+2028, U+2029), no bidirectional control (U+200E, U+200F, U+202A–U+202E,
// U+2066–U+2069), no `/` or `\`, and no space at either end. A name is printed on terminals, in
// logs and in file names, so none of these can forge a line, move the cursor or name another
// folder. Empty is valid here (an unnamed spec); the catalog refuses it.
func NameProblem(name string) string {
	if !utf8.ValidString(name) {
		return "it is not valid UTF-8"
	}
	if n := utf8.RuneCountInString(name); n > MaxNameLen {
		return fmt.Sprintf("it has %d characters; the most is %d", n, MaxNameLen)
	}
	for _, r := range name {
		switch {
		case unicode.IsControl(r):
			return fmt.Sprintf("it contains the control character %U", r)
		case isLineOrBidiControl(r):
			return fmt.Sprintf("it contains the invisible formatting character %U", r)
		case r == '/' || r == '\\':
			return fmt.Sprintf("it contains %q", r)
		}
	}
	if strings.TrimSpace(name) != name {
		return "it starts or ends with a space"
	}
	return ""
}

// isLineOrBidiControl reports the characters that end a line or reorder text on display.
func isLineOrBidiControl(r rune) bool {
	switch {
	case r == '\u2028', r == '\u2029', r == '\u200e', r == '\u200f':
		return true
	case r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069':
		return true
	}
	return false
}
