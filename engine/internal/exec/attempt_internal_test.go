package exec

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Secrets are redacted by name at any depth (in objects inside arrays too) and by the names a
// tool's schema marks secret; the args given are not modified.
func TestAttemptArgsRedacts(t *testing.T) {
	var c schemaSecrets
	names := c.names("t", json.RawMessage(`{"type":"object","properties":{
		"pw":{"type":"string","writeOnly":true},
		"conn":{"type":"object","properties":{"dsn":{"type":"string","x-secret":true},"host":{"type":"string"}}},
		"pin":{"type":"string","format":"password"},
		"shot":{"type":"string"}}}`))
	for _, n := range []string{"pw", "dsn", "pin"} {
		if !names[n] {
			t.Errorf("schema secrets = %v; want %s in them", names, n)
		}
	}
	if names["shot"] || names["host"] {
		t.Errorf("schema secrets = %v; want shot and host out of them", names)
	}
	inner := map[string]any{"dsn": "postgres://u:p@h", "host": "h"}
	args := map[string]any{
		"shot": "sh010", "pw": "x", "pin": "1234", "conn": inner,
		"API_Key": "k", "auth": map[string]any{"refresh_token": "r", "user": "td"},
		"list": []any{map[string]any{"Password": "p", "n": 1}, "plain"},
	}
	got := string(AttemptArgs(args, names))
	for _, secret := range []string{`"x"`, `"1234"`, "postgres://", `"k"`, `"r"`, `"p"`} {
		if strings.Contains(got, secret) {
			t.Errorf("args record %s keeps the secret %s", got, secret)
		}
	}
	for _, kept := range []string{`"shot":"sh010"`, `"host":"h"`, `"user":"td"`, `"n":1`, `"plain"`} {
		if !strings.Contains(got, kept) {
			t.Errorf("args record %s lost %s", got, kept)
		}
	}
	if inner["dsn"] != "postgres://u:p@h" || args["pw"] != "x" {
		t.Errorf("redaction modified the args given: %v", args)
	}
	if AttemptArgs(nil, nil) != nil {
		t.Errorf("AttemptArgs(nil) is not nil")
	}
}

// Args over store.MaxAttemptArgs become a marked, bounded preview cut on a character boundary.
func TestAttemptArgsBounded(t *testing.T) {
	at := map[string]any{"s": strings.Repeat("a", store.MaxAttemptArgs-8)} // {"s":"…"} is 8 bytes more
	if b := AttemptArgs(at, nil); len(b) != store.MaxAttemptArgs || strings.Contains(string(b), "_truncated") {
		t.Errorf("args of exactly %d bytes recorded as %d bytes (%.40s); want them whole", store.MaxAttemptArgs, len(b), b)
	}
	over := map[string]any{"s": strings.Repeat("€", store.MaxAttemptArgs)}
	b := AttemptArgs(over, nil)
	var rec struct {
		Truncated bool   `json:"_truncated"`
		Bytes     int    `json:"bytes"`
		Preview   string `json:"preview"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || !rec.Truncated || rec.Bytes != 3*store.MaxAttemptArgs+8 ||
		len(rec.Preview) > ArgsPreviewBytes || len(rec.Preview) < ArgsPreviewBytes-3 || strings.ContainsRune(rec.Preview, '\uFFFD') {
		t.Errorf("oversized args recorded as %.120s (%+v); want a preview of whole characters and the size", b, rec)
	}
}

func TestWorkerExitAndProcess(t *testing.T) {
	for _, c := range []struct{ kind, msg, want string }{
		{run.KindWorkerLost, `remote "maya" tool "x": worker pid 41 was lost during the call: EOF: the process exited (exit status 139); stderr: boom`, "exit status 139"},
		{run.KindWorkerLost, `… the process exited (signal: segmentation fault (core dumped))`, "signal: segmentation fault"},
		{run.KindWorkerLost, `… the process exited (signal: killed)`, "signal: killed"},
		{run.KindWorkerLost, `server http://farm:8000 was lost during the call: EOF`, ""},
		{run.KindTransient, `exit status 1`, ""},
	} {
		if got := workerExit(c.kind, c.msg); got != c.want {
			t.Errorf("workerExit(%s, %q) = %q; want %q", c.kind, c.msg, got, c.want)
		}
	}
	if h, pid := workerProcess("maya/4242"); h != localHost() || pid != 4242 {
		t.Errorf(`workerProcess("maya/4242") = %q, %d; want this host and 4242`, h, pid)
	}
	if h, pid := workerProcess("farm-07-4242-0a1b2c3d/maya/77"); h != "farm-07" || pid != 77 {
		t.Errorf(`workerProcess(ENGINE/POOL/PID) = %q, %d; want the engine's host and 77`, h, pid)
	}
	if h, pid := workerProcess("farm-07-4242-0a1b2c3d"); h != "farm-07" || pid != 4242 {
		t.Errorf(`workerProcess(ENGINE) = %q, %d; want the engine's host and pid`, h, pid)
	}
	if h, pid := workerProcess("odd-engine/maya/77"); h != "" || pid != 77 {
		t.Errorf(`workerProcess(odd ENGINE/POOL/PID) = %q, %d; want no host and 77`, h, pid)
	}
	for _, w := range []string{"maya/http://farm:8000/mcp", "eng-b-1-ab", "", "maya/x"} {
		if h, pid := workerProcess(w); h != "" || pid != 0 {
			t.Errorf("workerProcess(%q) = %q, %d; want none", w, h, pid)
		}
	}
}
