package exec

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// The attempt records (store.Attempt, docs/reference/cli/inspecting.md "show"): every call a tool or tool_remote
// step makes is a row, written with the step's own row (the row of the attempt's start goes
// with the step's running row, the row of its end with the retrying or terminal row), so it
// costs no extra write.

// Redacted replaces the value of a secret argument in an attempt record.
const Redacted = "[redacted]"

// ArgsPreviewBytes is the length of the preview of rendered args over store.MaxAttemptArgs.
const ArgsPreviewBytes = 1024

// secretWords are the argument names redacted whatever the tool's schema says: a name (at any
// depth) that contains one of them, case-insensitively.
var secretWords = []string{"token", "password", "passwd", "secret", "api_key", "apikey"}

// SecretName reports whether an argument named name is redacted by its name.
func SecretName(name string) bool {
	l := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// schemaSecrets caches, per tool, the names its args schema marks secret.
type schemaSecrets struct {
	mu sync.Mutex
	m  map[string]secretSet
}

type secretSet struct {
	schema string // the schema the names were read from
	names  map[string]bool
}

// toolRecord returns what an attempt record of a call of tool (a host or built-in tool, not a
// remote one) needs from its registration: the names its args schema marks secret (below), and
// whether its calls run in this engine's process (a host tool it hosts, or a built-in tool).
func (c *schemaSecrets) toolRecord(router *tools.Router, tool string) (map[string]bool, bool) {
	if router == nil {
		return nil, false
	}
	info, ok := router.Lookup(tool)
	if !ok {
		return nil, false
	}
	local := info.Builtin || router.ToHost(tool)
	if len(info.Schema) == 0 {
		return nil, local
	}
	return c.names(tool, info.Schema), local
}

// names returns the property names schema (tool's) marks secret: "writeOnly": true,
// "x-secret": true or "format": "password", at any depth. nil when none.
func (c *schemaSecrets) names(tool string, schema json.RawMessage) map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.m[tool]; ok && s.schema == string(schema) {
		return s.names
	}
	info := struct{ Schema json.RawMessage }{schema}
	var doc any
	_ = json.Unmarshal(info.Schema, &doc) // compiled at registration: valid
	names := map[string]bool{}
	collectSecrets(doc, names, 0)
	if len(names) == 0 {
		names = nil
	}
	if c.m == nil {
		c.m = map[string]secretSet{}
	}
	c.m[tool] = secretSet{schema: string(info.Schema), names: names}
	return names
}

func collectSecrets(v any, names map[string]bool, depth int) {
	if depth > 64 {
		return
	}
	switch v := v.(type) {
	case map[string]any:
		if props, ok := v["properties"].(map[string]any); ok {
			for name, p := range props {
				if pm, ok := p.(map[string]any); ok && secretSchema(pm) {
					names[name] = true
				}
			}
		}
		for _, x := range v {
			collectSecrets(x, names, depth+1)
		}
	case []any:
		for _, x := range v {
			collectSecrets(x, names, depth+1)
		}
	}
}

func secretSchema(p map[string]any) bool {
	return p["writeOnly"] == true || p["x-secret"] == true || p["format"] == "password"
}

// redact returns v with the value of every object member named secret (by SecretName or in
// names) replaced by Redacted, at any depth. v is not modified: when it has a secret member,
// the maps and slices on the way to it are copies.
func redact(v any, names map[string]bool) any {
	if !hasSecret(v, names) {
		return v
	}
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			if SecretName(k) || names[k] {
				out[k] = Redacted
			} else {
				out[k] = redact(x, names)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = redact(x, names)
		}
		return out
	}
	return v
}

func hasSecret(v any, names map[string]bool) bool {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if SecretName(k) || names[k] || hasSecret(x, names) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if hasSecret(x, names) {
				return true
			}
		}
	}
	return false
}

// RedactSecrets returns args with the value of every member whose name is a secret's
// (SecretName) replaced by Redacted, at any depth; args is not modified.
func RedactSecrets(args map[string]any) map[string]any {
	out, _ := redact(args, nil).(map[string]any)
	return out
}

// AttemptArgs returns the JSON text an attempt record keeps of rendered args: secrets redacted
// (redact), at most store.MaxAttemptArgs bytes; larger, {"_truncated": true, "bytes": N,
// "preview": "…"} with the first ArgsPreviewBytes of the text (whole UTF-8 characters). Invalid
// UTF-8 in a string is kept as U+FFFD. nil when args is nil.
func AttemptArgs(args map[string]any, names map[string]bool) json.RawMessage {
	return appendAttemptArgs(nil, args, names)
}

// appendAttemptArgs is AttemptArgs appending to buf (whose bytes it may overwrite and return).
func appendAttemptArgs(buf []byte, args map[string]any, names map[string]bool) json.RawMessage {
	if args == nil {
		return nil
	}
	b, err := appendJSON(buf[:0], redact(args, names))
	if err != nil {
		b, _ = json.Marshal(map[string]any{"_unencodable": err.Error()})
		return b
	}
	if len(b) <= store.MaxAttemptArgs {
		return b
	}
	p := b[:ArgsPreviewBytes]
	for len(p) > 0 && !utf8.Valid(p) {
		p = p[:len(p)-1]
	}
	out, _ := json.Marshal(map[string]any{"_truncated": true, "bytes": len(b), "preview": string(p)})
	return out
}

// The host and process that run the engine's in-process tools (read once: os.Getpid is a
// system call).
var (
	hostOnce sync.Once
	hostName string
	hostPID  int
)

func localHost() string {
	hostOnce.Do(func() { hostName, hostPID = hostnameOrEmpty(), os.Getpid() })
	return hostName
}

func localPID() int {
	localHost()
	return hostPID
}

func hostnameOrEmpty() string {
	h, _ := os.Hostname()
	return h
}

// exitRE finds how a lost worker's process ended in its error message.
var exitRE = regexp.MustCompile(`(exit status -?\d+|signal: [a-z ]+[a-z]|killed by signal \d+)`)

// workerExit returns how a lost worker's process ended ("exit status 139", "signal: segmentation
// fault"), from the error of an attempt of kind worker_lost; "" when the message does not say.
func workerExit(kind, msg string) string {
	if kind != run.KindWorkerLost {
		return ""
	}
	return exitRE.FindString(msg)
}

// engineIDRE matches the id of an engine on a shared database: "HOST-PID-" and 8 hex digits.
var engineIDRE = regexp.MustCompile(`^(.+)-(\d+)-[0-9a-f]{8}$`)

// workerProcess returns the host and pid of the process a worker reference names: a pool
// worker of this engine ("POOL/PID") runs on this host; a host tool another engine ran from the
// tool-call queue ("ENGINE", whose id is "HOST-PID-…") ran in that engine's process; a pool
// worker of another engine ("ENGINE/POOL/PID") on that engine's host. A server ("POOL/URL") has
// neither: "" and 0.
func workerProcess(worker string) (string, int) {
	if strings.Contains(worker, "://") {
		return "", 0
	}
	parts := strings.Split(worker, "/")
	host := ""
	if m := engineIDRE.FindStringSubmatch(parts[0]); m != nil && len(parts) != 2 {
		host = m[1]
		if len(parts) == 1 {
			pid, _ := strconv.Atoi(m[2])
			return host, pid
		}
	}
	if len(parts) < 2 {
		return "", 0
	}
	pid, err := strconv.Atoi(parts[len(parts)-1])
	if err != nil || pid <= 0 {
		return "", 0
	}
	if len(parts) == 2 {
		return localHost(), pid
	}
	return host, pid
}

// attemptTool is the tool an attempt record names: "DCC/TOOL" for a tool_remote step.
func attemptTool(sp *stepPlan) string {
	if sp.kind == spec.KindToolRemote {
		return sp.st.DCC + "/" + sp.st.Tool
	}
	return sp.st.Tool
}

// beginAttempt starts the record of attempt n (the step's own numbering) of in: written with
// the instance's next write. The first attempt starts with its step.
func (in *inst) beginAttempt(n int, args json.RawMessage, local bool) {
	r := in.r
	in.att = store.Attempt{RunID: r.id, StepKey: in.row.Key, Attempt: r.attemptBase[in.row.Key] + n, Tool: attemptTool(in.sp),
		Status: run.StepRunning, Args: args, StartedAt: in.row.StartedAt}
	if n > 1 {
		in.att.StartedAt = r.now()
	}
	if local {
		in.att.Host, in.att.PID = localHost(), localPID()
	}
	in.attPending = true
}

// endAttempt records the end of the attempt in progress: written with the instance's next write,
// which sets its FinishedAt (the write's time: the step's own end for its last attempt).
func (in *inst) endAttempt(status run.StepStatus, worker, kind, msg, trace string) {
	in.endSpan(status, worker, kind, msg) // trace.go
	a := &in.att
	if a.Attempt == 0 {
		return
	}
	a.Status, a.FinishedAt = status, time.Time{}
	if at := in.pulledAt.Load(); at != 0 {
		a.StartedAt = time.Unix(0, at).UTC() // a host call waited in its lane until then
	}
	a.ErrorKind, a.ErrorMessage, a.ErrorTrace = kind, msg, trace
	a.Exit = workerExit(kind, msg)
	if worker != "" {
		a.Worker = worker
		a.Host, a.PID = workerProcess(worker)
	}
	in.attPending = true
}

// pendingAttempt adds the instance's attempt record to b, written at now, when it has one not
// written yet; an attempt that ended gets now as its end, once.
func (in *inst) pendingAttempt(b *store.Batch, now time.Time) {
	if in.attPending {
		if in.att.Status != run.StepRunning && in.att.FinishedAt.IsZero() {
			in.att.FinishedAt = now
		}
		in.atts[0] = in.att
		b.Attempts = in.atts[:]
		if len(in.attFiles) > 0 {
			b.Files, in.attFiles = in.attFiles, nil
		}
	}
}

// attemptEnded hands the attempt b wrote to Config.OnAttemptEnd when it ended completed or
// failed (b carries an attempt record once per state: running, then ended).
func (r *runner) attemptEnded(b *store.Batch) {
	hook := r.x.cfg.OnAttemptEnd
	if hook == nil {
		return
	}
	for _, a := range b.Attempts {
		if a.Status != run.StepCompleted && a.Status != run.StepFailed {
			continue
		}
		end := AttemptEnd{Attempt: a, Workflow: r.name, Files: withoutPatterns(b.Files)}
		if n := len(r.ancestors); n > 0 {
			end.ParentRunID = r.ancestors[n-1]
		}
		hook(end)
	}
}

// recordedArgs returns the attempt record's JSON of args, the rendered args of sp (appendAttemptArgs
// with the secret names of the tool's schema): for args without placeholders and a schema that
// marks nothing secret, encoded once per plan; else into in's buffer.
func (sp *stepPlan) recordedArgs(in *inst, args map[string]any, names map[string]bool) json.RawMessage {
	static := sp.args != nil && sp.args.static && names == nil
	if static {
		if b := sp.staticArgs.Load(); b != nil {
			return *b
		}
		b := []byte(appendAttemptArgs(nil, args, nil))
		sp.staticArgs.Store(&b)
		return b
	}
	b := appendAttemptArgs(in.argsBuf, args, names)
	if cap(b) <= 4<<10 {
		in.argsBuf = b[:0]
	}
	return b
}
