package remote

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Config describes one remote MCP server, or a pool of them. Exactly one of URL, URLs and
// Command is set.
type Config struct {
	// URL is the streamable HTTP endpoint, e.g. "http://127.0.0.1:8765/mcp". The scheme is
	// http or https.
	URL string
	// URLs makes the remote a pool of streamable HTTP servers (docs/guide/pools.md, "Pools of
	// servers"): each member serves WorkersPerURL calls at a time, each call on a session of its
	// own. A member that cannot be reached or drops a call fails it with kind "worker_lost", and
	// is avoided by the next calls for MemberRetryAfter while other members are usable. Each URL
	// is checked as URL is; no URL may appear twice.
	URLs []string
	// WorkersPerURL is how many calls each member of URLs serves at a time: 0 = 1, else 1 to
	// MaxWorkers (URLs only).
	WorkersPerURL int
	// Headers are sent with every HTTP request (URL only).
	Headers map[string]string
	// TokenEnv names an environment variable holding a bearer token, sent as
	// "Authorization: Bearer <token>" (URL only). The variable is read from the pool's
	// environment (WithEnviron) when the connection is made; an unset or empty variable fails
	// the call with kind "permission".
	TokenEnv string

	// Command starts a child process that speaks MCP on its stdin and stdout: the program and
	// its arguments. The program is looked up in PATH when it has no path separator.
	Command []string
	// Env adds variables to the pool's environment (WithEnviron) for the child (Command only);
	// a key present in both takes this value.
	Env map[string]string
	// Dir is the child's working directory (Command only); "" is the engine's.
	Dir string

	// Timeout bounds each call made through this remote when it is positive; 0 means no
	// limit of its own (the caller's context still applies); negative is invalid. A call
	// that runs out of time has kind "timeout".
	Timeout time.Duration

	// Pool fields (Command only; docs/guide/pools.md). A command remote that sets none of them keeps
	// one shared child that serves concurrent calls (the behaviour before pools); setting any
	// of them makes the remote a pool of Workers identical children, each serving one call at
	// a time.

	// Workers is the most children the pool runs at once: 0 (no pool field set: one shared
	// child) or 1 to MaxWorkers. It bounds the licences a pool of DCC processes uses.
	Workers int
	// RecycleAfterCalls restarts a worker after it served this many calls, between calls;
	// 0 = never, else 1 to MaxRecycleAfterCalls.
	RecycleAfterCalls int
	// MaxRSSMB restarts a worker, between calls, whose resident set passed this many MiB
	// (read from /proc/PID/status on Linux; not checked elsewhere); 0 = no limit, else 1 to
	// MaxRSSMBCeiling.
	MaxRSSMB int
	// StartTimeout bounds a worker's start: spawning it and its answer to initialize;
	// 0 = DefaultStartTimeout, else 100 ms to MaxDuration.
	StartTimeout time.Duration
	// IdleStop stops a worker that has been idle this long (it starts again on demand);
	// 0 = never, else 100 ms to MaxDuration.
	IdleStop time.Duration
	// KillAfter is how long a worker has to finish a cancelled or timed-out call (the call
	// itself returns at once) before it is killed and replaced; 0 = DefaultKillAfter, else
	// 100 ms to MaxDuration.
	KillAfter time.Duration
	// Resources are the units of scarce resources each worker process holds while it lives
	// (a licence a DCC process checks out when it starts; docs/guide/resources.md): a worker
	// starts once the pool's UnitsFunc (WithUnits) has them, and gives them back when it
	// stops. nil = none. A pool of processes only; the names and amounts are the engine's to
	// check.
	Resources map[string]int
}

// Pool bounds and defaults (docs/guide/pools.md).
const (
	MaxWorkers           = 256
	MaxRecycleAfterCalls = 1_000_000
	MaxRSSMBCeiling      = 1 << 20 // 1 TiB
	MinDuration          = 100 * time.Millisecond
	MaxDuration          = 7 * 24 * time.Hour
	DefaultStartTimeout  = connectTimeout
	DefaultKillAfter     = 10 * time.Second
	// MemberRetryAfter is how long a pool of servers avoids a member that could not be reached
	// or dropped a call, while another member can take the call.
	MemberRetryAfter = 30 * time.Second
)

// pooled reports whether c is a pool of workers (processes or servers) rather than one shared
// connection.
func (c Config) pooled() bool {
	return len(c.URLs) > 0 || len(c.Command) > 0 && (c.Workers > 0 || c.RecycleAfterCalls > 0 || c.MaxRSSMB > 0 ||
		c.StartTimeout > 0 || c.IdleStop > 0 || c.KillAfter > 0)
}

// workers is the pool's size (at least 1): Workers, or for a pool of servers every member's
// WorkersPerURL.
func (c Config) workers() int {
	if len(c.URLs) > 0 {
		return len(c.URLs) * c.perURL()
	}
	return max(c.Workers, 1)
}

func (c Config) perURL() int { return max(c.WorkersPerURL, 1) }

func (c Config) startTimeout() time.Duration {
	if c.StartTimeout > 0 {
		return c.StartTimeout
	}
	return DefaultStartTimeout
}

func (c Config) killAfter() time.Duration {
	if c.KillAfter > 0 {
		return c.KillAfter
	}
	return DefaultKillAfter
}

// Validate reports every problem with c at once, joined with errors.Join; each message starts
// with the field name (e.g. "url: scheme must be http or https, not \"ftp\""). nil means valid.
// The sections are checked in this order, each adding its problems to one list: the endpoint
// (url, urls or command, the URLs, workers_per_url), the HTTP fields (headers, token_env), the
// fields of each kind used with the other and env, then the timeout and the pool fields.
func (c Config) Validate() error {
	var ps problems
	c.checkEndpoint(&ps)
	c.checkHTTPFields(&ps)
	c.checkKindFields(&ps)
	c.checkLimits(&ps)
	return errors.Join(ps...)
}

// problems are the problems of a Config, "field: message" each, in the order found.
type problems []error

// bad appends the problem of field.
func (ps *problems) bad(field, format string, args ...any) {
	*ps = append(*ps, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// checkEndpoint checks that exactly one of url, urls and command is set, every URL (http or
// https, with a host; none twice) and workers_per_url (0 or 1 to MaxWorkers, urls only).
func (c Config) checkEndpoint(ps *problems) {
	hasURLs := len(c.URLs) > 0
	hasURL, hasCommand := c.URL != "" || hasURLs, len(c.Command) > 0
	switch {
	case c.URL != "" && hasURLs:
		ps.bad("url", "url and urls are mutually exclusive: set one")
	case hasURL && hasCommand:
		ps.bad("url", "url and command are mutually exclusive: set one")
	case !hasURL && !hasCommand:
		ps.bad("url", "one of url (streamable HTTP) or command (stdio) is required")
	}
	if c.URL != "" {
		checkURL(ps, "url", c.URL)
	}
	seen := map[string]bool{}
	for i, raw := range c.URLs {
		checkURL(ps, fmt.Sprintf("url[%d]", i), raw)
		if seen[raw] {
			ps.bad(fmt.Sprintf("url[%d]", i), "%q appears twice; a server serving more calls at a time takes workers_per_url", raw)
		}
		seen[raw] = true
	}
	if c.WorkersPerURL < 0 || c.WorkersPerURL > MaxWorkers {
		ps.bad("workers_per_url", "must be 0 or 1 to %d, got %d", MaxWorkers, c.WorkersPerURL)
	}
	if c.WorkersPerURL != 0 && !hasURLs {
		ps.bad("workers_per_url", "applies to a pool of servers only (url given as a list)")
	}
}

// checkURL checks that raw, the value of field, is an http or https URL with a host.
func checkURL(ps *problems, field, raw string) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		ps.bad(field, "%v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		ps.bad(field, "scheme must be http or https, not %q", u.Scheme)
	case u.Host == "":
		ps.bad(field, "host is missing in %q", raw)
	}
}

// checkHTTPFields checks the header names (RFC 9110 tokens; no Authorization beside
// token_env) and token_env's variable name.
func (c Config) checkHTTPFields(ps *problems) {
	for name := range c.Headers {
		if !validHeaderName(name) {
			ps.bad("headers", "invalid header name %q", name)
		}
		if c.TokenEnv != "" && strings.EqualFold(name, "Authorization") {
			ps.bad("headers", "Authorization is set by token_env; do not set both")
		}
	}
	if c.TokenEnv != "" && !validEnvName(c.TokenEnv) {
		ps.bad("token_env", "invalid environment variable name %q", c.TokenEnv)
	}
}

// checkKindFields checks the command's program, that the fields of a url remote (headers,
// token_env) are not set on a command remote nor those of a command remote (env, dir) on a url
// remote, and env's variable names.
func (c Config) checkKindFields(ps *problems) {
	hasURL := c.URL != "" || len(c.URLs) > 0
	if len(c.Command) > 0 {
		if strings.TrimSpace(c.Command[0]) == "" {
			ps.bad("command", "the program (command[0]) is empty")
		}
		if len(c.Headers) > 0 {
			ps.bad("headers", "only valid with url, not with command")
		}
		if c.TokenEnv != "" {
			ps.bad("token_env", "only valid with url, not with command")
		}
	}
	if hasURL {
		if len(c.Env) > 0 {
			ps.bad("env", "only valid with command, not with url")
		}
		if c.Dir != "" {
			ps.bad("dir", "only valid with command, not with url")
		}
	}
	for name := range c.Env {
		if !validEnvName(name) {
			ps.bad("env", "invalid environment variable name %q", name)
		}
	}
}

// checkLimits checks the timeout (≥ 0), the ranges of the pool fields, and that the pool
// fields set apply to the kind of remote: a pool of processes, or a pool of servers.
func (c Config) checkLimits(ps *problems) {
	if c.Timeout < 0 {
		ps.bad("timeout", "must not be negative, got %v", c.Timeout)
	}
	ints := []struct {
		field  string
		v, max int
	}{{"workers", c.Workers, MaxWorkers}, {"recycle_after_calls", c.RecycleAfterCalls, MaxRecycleAfterCalls}, {"max_rss_mb", c.MaxRSSMB, MaxRSSMBCeiling}}
	for _, f := range ints {
		if f.v < 0 || f.v > f.max {
			ps.bad(f.field, "must be 0 or 1 to %d, got %d", f.max, f.v)
		}
	}
	for _, f := range []struct {
		field string
		v     time.Duration
	}{{"start_timeout", c.StartTimeout}, {"idle_stop", c.IdleStop}, {"kill_after", c.KillAfter}} {
		if f.v != 0 && (f.v < MinDuration || f.v > MaxDuration) {
			ps.bad(f.field, "must be 0 or %v to %v, got %v", MinDuration, MaxDuration, f.v)
		}
	}
	switch {
	case len(c.URLs) > 0 && (c.Workers > 0 || c.RecycleAfterCalls > 0 || c.MaxRSSMB > 0 || c.KillAfter > 0):
		ps.bad("workers", "workers, recycle_after_calls, max_rss_mb and kill_after apply to pools of processes (command); a pool of servers takes workers_per_url, start_timeout and idle_stop")
	case c.URL != "" && (c.Workers > 0 || c.RecycleAfterCalls > 0 || c.MaxRSSMB > 0 || c.StartTimeout > 0 || c.IdleStop > 0 || c.KillAfter > 0):
		ps.bad("workers", "pool fields (workers, recycle_after_calls, max_rss_mb, start_timeout, idle_stop, kill_after) apply to command remotes and to a list of URLs, not to a single url: for a pool of servers give urls")
	}
}

// validHeaderName reports whether name is an RFC 9110 token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validEnvName reports whether name can be an environment variable name: not empty, no '='
// and no NUL.
func validEnvName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "=\x00")
}
