package sqlrow

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// TestCacheFilesDecodes: the files column as SQLite and PostgreSQL write it (compact, or with
// spaces and newlines), escapes of every kind, a surrogate pair, bytes that are not UTF-8 kept
// as they are, a dev and ino past the largest int64 (stored as negative), null hash and error.
func TestCacheFilesDecodes(t *testing.T) {
	for _, text := range []string{
		`[[7,"read","/show/a\"b\\c\/d\n\t\r\b\f\u0001\u00e9\ud83d\ude00\u2028.usd","ok",12,1700000000123456789,-1,-2,"blake3:00",null,1700000001000000000,1700000002000000000],` +
			`[9,"write","/show/bad` + "\xff\xfe" + `é.exr","missing",0,0,0,0,null,"gone",5,0]]`,
		"[[7, \"read\", \"/show/a\\\"b\\\\c\\/d\\n\\t\\r\\b\\f\\u0001\\u00e9\\ud83d\\ude00\\u2028.usd\", \"ok\", 12, 1700000000123456789, -1, -2, \"blake3:00\", null, 1700000001000000000, 1700000002000000000], \n" +
			" [9, \"write\", \"/show/bad\xff\xfeé.exr\", \"missing\", 0, 0, 0, 0, null, \"gone\", 5, 0]]",
	} {
		got, err := cacheFiles([]byte(text), "r1", "each[3].x", 2)
		if err != nil {
			t.Fatalf("cacheFiles(%q): %v", text, err)
		}
		want := []store.FileRecord{
			{ID: 7, RunID: "r1", StepKey: "each[3].x", Attempt: 2, Role: store.FileRead, Path: "/show/a\"b\\c/d\n\t\r\b\f\x01é😀\u2028.usd",
				State: store.FileOK, Size: 12, ModTime: time.Unix(0, 1700000000123456789).UTC(), Dev: 1<<64 - 1, Ino: 1<<64 - 2,
				Hash: "blake3:00", RecordedAt: time.Unix(0, 1700000001000000000).UTC(), VerifiedAt: time.Unix(0, 1700000002000000000).UTC()},
			{ID: 9, RunID: "r1", StepKey: "each[3].x", Attempt: 2, Role: store.FileWrite, Path: "/show/bad\xff\xfeé.exr",
				State: store.FileMissing, Error: "gone", RecordedAt: time.Unix(0, 5).UTC()},
		}
		if len(got) != len(want) {
			t.Fatalf("cacheFiles(%q) = %+v; want %+v", text, got, want)
		}
		for i := range want {
			if !got[i].ModTime.Equal(want[i].ModTime) || !got[i].RecordedAt.Equal(want[i].RecordedAt) || !got[i].VerifiedAt.Equal(want[i].VerifiedAt) {
				t.Errorf("record %d times = %v, %v, %v; want %v, %v, %v", i, got[i].ModTime, got[i].RecordedAt, got[i].VerifiedAt,
					want[i].ModTime, want[i].RecordedAt, want[i].VerifiedAt)
			}
			got[i].ModTime, got[i].RecordedAt, want[i].ModTime, want[i].RecordedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			got[i].VerifiedAt, want[i].VerifiedAt = time.Time{}, time.Time{}
			if got[i] != want[i] {
				t.Errorf("record %d = %+v;\nwant %+v", i, got[i], want[i])
			}
		}
	}
}

// TestCacheFilesAgreesWithEncodingJSON: for valid UTF-8 strings the decoder reads what
// encoding/json reads, however they are escaped.
func TestCacheFilesAgreesWithEncodingJSON(t *testing.T) {
	paths := []string{"", "/a", `C:\show\x.usd`, "\\\\srv\\share\\\"q\"", "tab\there", "\u2028\u2029<>&", "😀/é/\x7f", strings.Repeat("ü", 300)}
	for _, p := range paths {
		enc, _ := json.Marshal([]any{[]any{1, "read", p, "ok", 1, 2, 3, 4, p, nil, 5, 6}})
		got, err := cacheFiles(enc, "r", "s", 1)
		if err != nil || len(got) != 1 || got[0].Path != p || got[0].Hash != p {
			t.Errorf("cacheFiles(%s) = %+v, %v; want path %q", enc, got, err, p)
		}
	}
}

// TestCacheFilesRefusesBadJSON: truncated or malformed input is an error, never a panic.
func TestCacheFilesRefusesBadJSON(t *testing.T) {
	full := `[[1,"read","/a","ok",1,2,3,4,"h",null,5,6]]`
	for i := 0; i < len(full); i++ {
		if _, err := cacheFiles([]byte(full[:i]), "r", "s", 1); err == nil {
			t.Errorf("cacheFiles(%q) = no error; want one (truncated)", full[:i])
		}
	}
	for _, bad := range []string{`{}`, `[1]`, `[[1,"read"]]`, `[["x","read","/a","ok",1,2,3,4,"h",null,5,6]]`,
		`[[1,"read","/a","ok",1,2,3,4,"h",nul,5,6]]`, `[[1,"read","/a\q","ok",1,2,3,4,"h",null,5,6]]`,
		`[[1,"read","/a\u12","ok",1,2,3,4,"h",null,5,6]]`, `[[1,"read","/a","ok",1,2,3,4,"h",null,5,6]] x`,
		`[[1,"read","/a","ok",1,2,3,4,"h",null,5,6],]`, `[[1,"read","/a","ok",99999999999999999999,2,3,4,"h",null,5,6]]`} {
		if _, err := cacheFiles([]byte(bad), "r", "s", 1); err == nil {
			t.Errorf("cacheFiles(%q) = no error; want one", bad)
		}
	}
	if got, err := cacheFiles([]byte(` [ ] `), "r", "s", 1); err != nil || len(got) != 0 {
		t.Errorf("cacheFiles([]) = %v, %v; want none", got, err)
	}
}
