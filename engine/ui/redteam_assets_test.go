package ui_test

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/ui"
)

// Hostile queries of the file routes: each a 4xx with a message (or an empty answer), never a
// 5xx, and nothing about a file the record does not hold (a path no attempt recorded is 404
// without the file being looked at).
func TestRedteamFileRoutes(t *testing.T) {
	t.Parallel()
	b := newBench(t, ui.Options{})
	dir, _ := filesRun(t, b)
	long := "/" + strings.Repeat("a", 60_000)
	manyLong := strings.Repeat("path="+url.QueryEscape("/"+strings.Repeat("b", 4000))+"&", 100)
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/api/lineage?path=%2Fetc%2Fpasswd", 404},
		{"/api/lineage?path=..%2F..%2F..%2Fetc%2Fshadow", 404},
		{"/api/lineage?path=" + url.QueryEscape(long), 404},
		{"/api/lineage?path=%00", 400},
		{"/api/lineage?path=%2Fa&depth=99999999999999999999999", 400},
		{"/api/lineage?path=%2Fa&depth=1e3", 400},
		{"/api/lineage?path=%2Fa&depth=%2B5", 404}, // strconv reads +5: a valid depth
		{"/api/lineage?path=C%3A%5Cshots%5Ca.fbx", 404},
		{"/api/lineage?path=%5C%5Cnas%5Cshow%5Ca.usd", 404},
		{"/api/lineage?path=%FF%FE", 404},
		{"/api/stale?path=%2F", 200},
		{"/api/stale?path=" + url.QueryEscape(long), 200},
		{"/api/stale?" + manyLong, 200},
		{"/api/stale?path=" + url.QueryEscape(filepath.Join(dir, "..", "..")), 200},
	} {
		code, body, _ := b.do(t, "GET", tc.path, nil)
		if code != tc.status {
			t.Errorf("GET %.100s: %d %.300s; want %d", tc.path, code, body, tc.status)
		}
		if code >= 400 && errorCode(body) == "" {
			t.Errorf("GET %.100s: %d without an error code: %.300s", tc.path, code, body)
		}
	}
}
