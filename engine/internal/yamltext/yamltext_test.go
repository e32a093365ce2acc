package yamltext

import (
	"errors"
	"strings"
	"testing"
)

func TestSuggest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"tol", "tool"}, {"backof", "backoff"}, {"xyz", ""}, {"a", ""}, {strings.Repeat("q", 100), ""},
	} {
		if got := Suggest(tc.in, []string{"tool", "args", "backoff"}); got != tc.want {
			t.Errorf("Suggest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if EditDistance("kitten", "sitting") != 3 || EditDistance("", "") != 0 {
		t.Fatal("EditDistance")
	}
}

func TestLineColAndOffsets(t *testing.T) {
	t.Parallel()
	data := []byte("ab\ncé\nx")
	for off, want := range map[int][2]int{0: {1, 1}, 2: {1, 3}, 3: {2, 1}, 6: {2, 3}, 99: {3, 2}, -1: {1, 1}} {
		if l, c := LineCol(data, off); l != want[0] || c != want[1] {
			t.Errorf("LineCol(%d) = %d:%d, want %d:%d", off, l, c, want[0], want[1])
		}
	}
	if InvalidUTF8Offset([]byte("ok\xffno")) != 2 {
		t.Fatal("InvalidUTF8Offset")
	}
}

func TestCursorAgreesWithLineCol(t *testing.T) {
	t.Parallel()
	data := []byte("ab\ncé\n\xffx\n\n日本 {\"k\": 1}")
	c := NewCursor(data)
	check := func(off int) {
		l, col := c.LineCol(off)
		if wl, wc := LineCol(data, off); l != wl || col != wc {
			t.Fatalf("Cursor.LineCol(%d) = %d:%d, LineCol = %d:%d", off, l, col, wl, wc)
		}
	}
	for off := -1; off <= len(data)+1; off++ { // increasing, as a parser asks
		check(off)
	}
	for _, off := range []int{7, 3, 3, 12, 0, 5, len(data)} { // and out of order
		check(off)
	}
}

func TestFlowDepth(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]int{
		"a: [1, {b: [2]}]":           3,
		`a: "[[[["`:                  0,
		"a: It's [1] # [[[[":         1,
		"a: {{inputs.x}}":            2,
		strings.Repeat("[", 70) + "": 70,
	} {
		if got := FlowDepth([]byte(text)); got != want {
			t.Errorf("FlowDepth(%q) = %d, want %d", text, got, want)
		}
	}
}

func TestErrorPosition(t *testing.T) {
	t.Parallel()
	l, c, msg := ErrorPosition(errors.New("yaml: line 7: did not find expected key"))
	if l != 7 || c != 1 || msg != "line 7: did not find expected key" {
		t.Fatalf("%d %d %q", l, c, msg)
	}
	if l, c, _ := ErrorPosition(errors.New("yaml: unknown")); l != 0 || c != 0 {
		t.Fatalf("%d %d", l, c)
	}
}
