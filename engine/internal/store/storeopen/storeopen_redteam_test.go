package storeopen_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Issue #33 item 7: a libpq keyword/value string was opened as a SQLite file named after the
// password, and a URL with a space after its scheme echoed the password in the parse error.
func TestRedteamConnectionStringsNeverShowTheirPassword(t *testing.T) {
	t.Chdir(t.TempDir())
	const secret = "hunter2secret"
	for _, db := range []string{
		"host=127.0.0.1 password=" + secret + " dbname=x",
		"  dbname=flow user=ana password=" + secret,
		"sslpassword=" + secret + " host=db",
		"postgresql:// host=127.0.0.1 password=" + secret,
		"postgresql://u:" + secret + "@[bad/x",
		"postgres://u:" + secret + "@host:99999999/db",
	} {
		st, err := storeopen.Open(context.Background(), db, false)
		if err == nil {
			st.Close()
			t.Fatalf("%q: opened", db)
		}
		var re *run.Error
		if !errors.As(err, &re) || re.Code != run.CodeInvalidRequest {
			t.Errorf("%q: want invalid_request, got %#v", db, err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%q: the error shows the password: %v", db, err)
		}
		if strings.Contains(storeopen.Redact(db), secret) {
			t.Errorf("%q: Redact shows the password: %s", db, storeopen.Redact(db))
		}
	}
	if entries, _ := os.ReadDir("."); len(entries) != 0 {
		t.Fatalf("files created: %v", entries)
	}
	// A file really named so is still a file, written with a folder.
	st, err := storeopen.Open(context.Background(), "./host=x", false)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
}
