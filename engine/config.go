package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/expr"
	"github.com/dcc-flow/dcc-flow/engine/internal/remote"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// DefaultStallAfterSecs is the quiet period before a stall_detected event when the config says 0.
const DefaultStallAfterSecs = 300

// MemoryDB names the in-memory database explicitly; "" means the same.
const MemoryDB = ":memory:"

// Config configures an Engine. The zero value is an in-memory engine with defaults; it is
// JSON-encodable so the C ABI and the CLI pass it as is.
type Config struct {
	// DB is where runs are kept: "" or ":memory:" for memory (nothing survives Close), a
	// postgres:// or postgresql:// URL for a PostgreSQL database (docs/operations/cluster.md; migrated
	// when opened), else the path of a SQLite file, created with its folder when missing.
	// Opening a database recovers it: runs a previous process left unfinished become
	// interrupted.
	DB string `json:"db,omitempty"`
	// ReadOnly opens DB without owning it, beside the process that does (one process at a
	// time writes a database; opening one owned elsewhere fails with code db_locked). A
	// read-only engine reads every run and event the owner commits and asks the owner to
	// approve or cancel runs; it cannot start or resume runs (code read_only) and recovers
	// nothing. Needs a file DB.
	ReadOnly bool `json:"read_only,omitempty"`
	// EnvAllow lists path.Match patterns ("DCC_*", "PIPELINE_ROOT") of the environment variables
	// that runs submitted over MCP, webhooks or schedules see as {{env.X}}. Local runs see the
	// whole environment. Empty = remote runs see no variable.
	EnvAllow []string `json:"env_allow,omitempty"`
	// Remotes are the MCP servers tool_remote steps name with `dcc:`, by name.
	Remotes map[string]RemoteConfig `json:"remotes,omitempty"`
	// ToolPools routes `tool` steps to remotes (worker pools) by tool name: path.Match patterns
	// ("maya__*") to a name of Remotes (on a shared PostgreSQL database, or of a remote another
	// attached engine has: checked at submit; docs/operations/cluster.md "Pools and remotes on other
	// engines"). When several match, the longest pattern wins (then the
	// first in byte order). A step's own `pool:` comes first. So a spec runs its tools
	// in-process where no mapping is configured (tests) and on pools where it is
	// (docs/guide/pools.md, "Routing").
	ToolPools map[string]string `json:"tool_pools,omitempty"`
	// StallAfterSecs is the quiet period after which a running run (not one waiting for an
	// approval) gets a stall_detected event: 0 means DefaultStallAfterSecs, negative disables
	// stall detection.
	StallAfterSecs float64 `json:"stall_after_secs,omitempty"`
	// InterruptGraceSecs is how long a host tool whose attempt timed out is given to stop (the
	// Python package interrupts it) before the attempt is abandoned and the step moves on
	// (docs/reference/python/tools.md, "Timeouts and cancel"): 0 means 2 seconds; otherwise 0.01 to 300.
	InterruptGraceSecs float64 `json:"interrupt_grace_secs,omitempty"`
	// LeaseSecs is the lease under which an engine on a shared database (PostgreSQL,
	// docs/operations/cluster.md "Leases") orchestrates each of its runs: it renews its leases every
	// LeaseSecs/3, and another engine takes a run over once its lease has expired. 0 means
	// DefaultLeaseSecs (15); otherwise 0.3 to 3600. Unused on other databases.
	LeaseSecs float64 `json:"lease_secs,omitempty"`
	// CloseGraceSecs is, on a shared database, how long Close waits for the host calls that the
	// host is running for runs it can hand over to another engine (docs/operations/cluster.md, "Closing an
	// engine"): answered within it, a call's result is kept; past it, the call is cancelled and
	// the run handed over all the same, and the next engine calls that step again. 0 means
	// DefaultCloseGraceSecs (10); otherwise 0.01 to 3600. Unused on other databases.
	CloseGraceSecs float64 `json:"close_grace_secs,omitempty"`
	// Seed seeds the random source of retry jitter; 0 means a random seed. Tests set it for
	// reproducible delays.
	Seed int64 `json:"seed,omitempty"`
	// MaxForeachItems is the most items one foreach iterates (docs/reference/spec.md#limits): 0 means
	// exec.DefaultMaxForeachItems (100,000); 1 to exec.MaxForeachItemsCeiling (10,000,000).
	// Past it the foreach fails with kind limit_exceeded before any iteration starts.
	MaxForeachItems int `json:"max_foreach_items,omitempty"`
	// MaxFilesPerStep is the most files one attempt of a tool step records — its declared reads
	// and writes, globs expanded, and the files its tool reported (docs/guide/assets.md): 0 means
	// exec.DefaultMaxFilesPerStep (10,000); 1 to exec.MaxFilesPerStepCeiling (10,000,000).
	// Past it the step fails with kind limit_exceeded.
	MaxFilesPerStep int `json:"max_files_per_step,omitempty"`
	// Env is the environment this engine runs tools with — the DCC's name and version, plugin
	// versions (docs/guide/assets.md): a JSON object recorded with every attempt whose tool's side
	// reported none, and part of every cache key, so that a new Maya or plugin version is a cache
	// miss. nil = none.
	Env json.RawMessage `json:"env,omitempty"`
	// JSONPathMaxResults is the most nodes one evaluation of a foreach `items` or branch `on`
	// JSONPath holds at once: 0 means expr.DefaultMaxResults (1,000,000); 1 to
	// expr.MaxResultsCeiling (100,000,000). Past it the step fails with kind limit_exceeded.
	JSONPathMaxResults int `json:"jsonpath_max_results,omitempty"`
	// JSONPathMaxWork is the most work one such evaluation does, in nodes visited, tested or
	// selected: 0 means expr.DefaultMaxWork (10,000,000); 1 to expr.MaxWorkCeiling
	// (1,000,000,000). Past it the step fails with kind limit_exceeded.
	JSONPathMaxWork int `json:"jsonpath_max_work,omitempty"`
	// MaxDepth is how deep sub-workflows (`kind: workflow` steps) nest: a run started on its
	// own is at depth 0, its child runs at 1. 0 means exec.DefaultMaxDepth (8); 1 to
	// exec.MaxDepthCeiling (64). A child that would be deeper is not started: its step fails
	// with kind limit_exceeded.
	MaxDepth int `json:"max_depth,omitempty"`
	// MaxTreeRuns is how many runs one tree of sub-workflows holds — a run started on its own,
	// its child runs, theirs, and so on, retries and finished runs included, counted from the
	// database when a tree is resumed: 0 means exec.DefaultMaxTreeRuns (10,000); 1 to
	// exec.MaxTreeRunsCeiling (10,000,000). A child run past it is not started: its workflow
	// step fails with kind limit_exceeded.
	MaxTreeRuns int `json:"max_tree_runs,omitempty"`
	// MaxTreeInstances is how many step instances the runs of one tree plan together (each
	// run's steps, and n × its body for a foreach of n items), counted by the engine running
	// them: 0 means exec.DefaultMaxTreeInstances (1,000,000); 1 to
	// exec.MaxTreeInstancesCeiling (1,000,000,000). A foreach that would pass it fails before
	// any iteration, with kind limit_exceeded.
	MaxTreeInstances int `json:"max_tree_instances,omitempty"`
	// MaxTreeParallel is how many foreach iterations beyond the first of each foreach (and steps
	// of a parallel step or depends_on list beyond the first of each list) the runs of one tree
	// have in flight at once, in this engine (each holds a goroutine, and whatever
	// its body runs: a child run and its own foreach workers): 0 means
	// exec.DefaultMaxTreeParallel (1,000); 1 to exec.MaxTreeParallelCeiling (1,000,000). It
	// fails nothing: a foreach that finds no slot free runs fewer iterations at once than its
	// concurrency, at least one, and takes slots back as they free up.
	MaxTreeParallel int `json:"max_tree_parallel,omitempty"`
	// Defaults are the engine's policy defaults for the tool and tool_remote steps of every run
	// (docs/reference/spec.md, "Defaults"): a step's own field comes first, then its spec's `defaults`,
	// then these, then none. nil = none.
	Defaults *PolicyDefaults `json:"defaults,omitempty"`
	// OpenLineage, when set, sends OpenLineage run events for the attempts that read or wrote
	// files (docs/guide/openlineage.md); nil = off.
	OpenLineage *OpenLineageConfig `json:"openlineage,omitempty"`
	// Tracing, when enabled, exports OpenTelemetry traces of the runs (docs/guide/tracing.md);
	// nil = off.
	Tracing *TracingConfig `json:"tracing,omitempty"`
	// Resources declares the scarce resources (licences, GPUs) that tool steps ask for with their
	// `resources` field (docs/guide/resources.md), by name (as a step id: a letter or _, then
	// letters, digits, _ and -, at most 64): each with its limit. A run whose step asks for a
	// name not declared here, or for more than its limit, is refused when it starts. nil = none.
	Resources map[string]ResourceConfig `json:"resources,omitempty"`
}

// ResourceConfig declares one scarce resource.
type ResourceConfig struct {
	// Limit is how many units of the resource the steps hold at once: across every run of this
	// engine on SQLite or in memory, and across every engine on a shared PostgreSQL database. 1 to
	// spec.MaxResourceAmount (1,000,000); 0 and negatives are refused.
	Limit int `json:"limit"`
	// Probe, when set, reads the live count of the resource (a licence server's free licences)
	// and lowers the limit to it (docs/guide/resources.md, "Live counts"); nil = the declared
	// limit always.
	Probe *ResourceProbe `json:"probe,omitempty"`
}

// ResourceProbe is a command whose output says how many units of a resource are free, e.g.
// FlexLM's `lmutil lmstat -f houdini -c 27000@licsrv`.
type ResourceProbe struct {
	// Command is the argv run (no shell; Command[0] looked up in PATH), 1 to 64 arguments.
	Command []string `json:"command"`
	// EverySecs is how often it runs: 0 = 30, else 1 to 86,400.
	EverySecs int `json:"every_secs,omitempty"`
	// TimeoutSecs bounds one run (the process group is killed then): 0 = 10, else 1 to 600, and
	// at most EverySecs (its default included).
	TimeoutSecs int `json:"timeout_secs,omitempty"`
	// Parser reads the output: "lmstat" (issued − in use on the "Users of FEATURE:" lines) or
	// "regex" (Regex's one capture group is the free count).
	Parser string `json:"parser"`
	// Feature is the feature lmstat's lines name; "" = the resource's name. Only with lmstat.
	Feature string `json:"feature,omitempty"`
	// Regex is an RE2 expression with exactly one capture group. Only with regex.
	Regex string `json:"regex,omitempty"`
}

// resourceLimits returns the declared limits by resource name; nil when none is declared.
func (c Config) resourceLimits() map[string]int {
	if len(c.Resources) == 0 {
		return nil
	}
	out := make(map[string]int, len(c.Resources))
	for name, r := range c.Resources {
		out[name] = r.Limit
	}
	return out
}

// PolicyDefaults are engine-wide step policy defaults, written as the spec's `defaults` block.
type PolicyDefaults struct {
	// TimeoutSecs is the per-attempt deadline of a step that has none: 0 = none, else 0.001 to
	// 31536000 (as a step's timeout_secs).
	TimeoutSecs float64 `json:"timeout_secs,omitempty"`
	// Retry is the retry policy of a step that has none, as a spec's `retry` mapping
	// ({"max_attempts": 3, "backoff": "exponential", "multiplier": 1.5, …}; max_attempts is
	// required); nil = none. It is checked as a spec's retry is.
	Retry map[string]any `json:"retry,omitempty"`
}

// specDefaults checks d as the `defaults` block of a spec and returns it; problems are the
// spec validator's messages ("defaults.retry.max_attempts: …"), nil when d is fine.
func (d *PolicyDefaults) specDefaults() (spec.Defaults, []string) {
	if d == nil || (d.TimeoutSecs == 0 && d.Retry == nil) {
		return spec.Defaults{}, nil
	}
	block := map[string]any{}
	if d.TimeoutSecs != 0 {
		block["timeout_secs"] = d.TimeoutSecs
	}
	if d.Retry != nil {
		block["retry"] = d.Retry
	}
	if math.IsNaN(d.TimeoutSecs) || math.IsInf(d.TimeoutSecs, 0) {
		return spec.Defaults{}, []string{"defaults.timeout_secs: must be a finite number of seconds"}
	}
	text, err := json.Marshal(map[string]any{"defaults": block, "steps": []any{map[string]any{"id": "a", "tool": "t"}}})
	if err != nil {
		return spec.Defaults{}, []string{"defaults: " + err.Error()}
	}
	s, err := spec.Parse(text, spec.Options{Format: spec.FormatJSON})
	if err == nil {
		err = s.Validate()
	}
	var ve *spec.ValidationError
	if errors.As(err, &ve) {
		var out []string
		for _, p := range ve.Problems {
			msg := p.Message
			if p.Hint != "" && !strings.Contains(msg, p.Hint) {
				msg += " (" + p.Hint + ")"
			}
			out = append(out, msg)
		}
		return spec.Defaults{}, out
	}
	if err != nil {
		return spec.Defaults{}, []string{"defaults: " + err.Error()}
	}
	return s.Defaults, nil
}

// limits returns the executor limits of c (zero fields are the executor's defaults).
func (c Config) limits() exec.Limits {
	return exec.Limits{
		MaxForeachItems: c.MaxForeachItems,
		MaxFilesPerStep: c.MaxFilesPerStep,
		JSONPath:        expr.Limits{MaxResults: c.JSONPathMaxResults, MaxWork: c.JSONPathMaxWork},
	}
}

// RemoteConfig describes a remote MCP server (docs/reference/mcp.md, "Calling other MCP servers"): exactly
// one of URL, URLs and Command. In JSON, "url" is a string (URL) or a list of strings (URLs).
type RemoteConfig struct {
	// URL is a streamable HTTP endpoint such as "http://127.0.0.1:8765/mcp".
	URL string `json:"-"`
	// URLs makes the remote one pool of streamable HTTP servers (docs/guide/pools.md, "Pools of
	// servers"), each serving WorkersPerURL calls at a time; "url" given as a list.
	URLs []string `json:"-"`
	// WorkersPerURL is how many calls each server of URLs serves at a time: 0 = 1, else 1 to 256.
	WorkersPerURL int `json:"workers_per_url,omitempty"`
	// Headers are sent with every HTTP request (URL only).
	Headers map[string]string `json:"headers,omitempty"`
	// TokenEnv names an environment variable holding a bearer token (URL only).
	TokenEnv string `json:"token_env,omitempty"`
	// Command starts a stdio MCP server: the program and its arguments.
	Command []string `json:"command,omitempty"`
	// Env adds variables to the child's environment (Command only).
	Env map[string]string `json:"env,omitempty"`
	// Dir is the child's working directory (Command only); "" = the engine's.
	Dir string `json:"dir,omitempty"`
	// TimeoutSecs bounds each call through this remote; 0 = no limit of its own; negative is
	// invalid.
	TimeoutSecs float64 `json:"timeout_secs,omitempty"`

	// Pool fields (command remotes only; docs/guide/pools.md). Setting any of them makes the remote a
	// pool of identical worker processes, each serving one call at a time; a command remote
	// without them keeps one shared child serving concurrent calls.

	// Workers is the most worker processes at once: 1 to 256 (0 = not a pool, unless another
	// pool field is set: then 1).
	Workers int `json:"workers,omitempty"`
	// RecycleAfterCalls restarts a worker after this many calls: 0 = never, else 1 to 1,000,000.
	RecycleAfterCalls int `json:"recycle_after_calls,omitempty"`
	// MaxRSSMB restarts a worker whose resident memory passed this many MiB, between calls
	// (Linux only): 0 = no limit, else 1 to 1,048,576.
	MaxRSSMB int `json:"max_rss_mb,omitempty"`
	// StartTimeoutSecs bounds a worker's start (spawn and initialize): 0 = 30, else 0.1 to 604,800.
	StartTimeoutSecs float64 `json:"start_timeout_secs,omitempty"`
	// IdleStopSecs stops a worker idle this long: 0 = never, else 0.1 to 604,800.
	IdleStopSecs float64 `json:"idle_stop_secs,omitempty"`
	// KillAfterSecs is how long a worker has to finish a cancelled call before it is killed and
	// replaced: 0 = 10, else 0.1 to 604,800.
	KillAfterSecs float64 `json:"kill_after_secs,omitempty"`
	// Resources are the units of the engine's scarce resources each worker process holds while
	// it lives (a licence a DCC process checks out when it starts; docs/guide/resources.md), by
	// name, each one the engine declares and 1 to its limit: a worker starts once they are free
	// and gives them back when it stops. Pools of processes only.
	Resources map[string]int `json:"resources,omitempty"`
}

// remoteConfigJSON is RemoteConfig without its methods, for its JSON encoding.
type remoteConfigJSON RemoteConfig

// UnmarshalJSON reads a remote's object strictly (an unknown field is an error, as for the rest
// of the config), with "url" a string or a list of strings.
func (r *RemoteConfig) UnmarshalJSON(data []byte) error {
	var v struct {
		*remoteConfigJSON
		URL json.RawMessage `json:"url,omitempty"`
	}
	v.remoteConfigJSON = (*remoteConfigJSON)(r)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return err
	}
	r.URL, r.URLs = "", nil
	raw := bytes.TrimSpace(v.URL)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
	case raw[0] == '[':
		if err := json.Unmarshal(raw, &r.URLs); err != nil {
			return fmt.Errorf("url: a list of URLs must hold strings only: %w", err)
		}
		if len(r.URLs) == 0 {
			return errors.New("url: the list of URLs is empty; give at least one")
		}
	default:
		if err := json.Unmarshal(raw, &r.URL); err != nil {
			return fmt.Errorf("url: must be a URL or a list of URLs: %w", err)
		}
	}
	return nil
}

// MarshalJSON writes "url" as a string, or as a list for URLs.
func (r RemoteConfig) MarshalJSON() ([]byte, error) {
	v := struct {
		remoteConfigJSON
		URL any `json:"url,omitempty"`
	}{remoteConfigJSON: remoteConfigJSON(r)}
	switch {
	case len(r.URLs) > 0:
		v.URL = r.URLs
	case r.URL != "":
		v.URL = r.URL
	}
	return json.Marshal(v)
}

// pooled reports whether r sets any pool field (remote.Config makes the same choice).
func (r RemoteConfig) pooled() bool {
	return r.Workers != 0 || r.RecycleAfterCalls != 0 || r.MaxRSSMB != 0 || r.StartTimeoutSecs != 0 ||
		r.IdleStopSecs != 0 || r.KillAfterSecs != 0
}

var remoteNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

// WithDefaults returns a copy of c with zero values replaced by their defaults.
func (c Config) WithDefaults() Config {
	if c.StallAfterSecs == 0 {
		c.StallAfterSecs = DefaultStallAfterSecs
	}
	if c.LeaseSecs == 0 {
		c.LeaseSecs = DefaultLeaseSecs
	}
	if c.CloseGraceSecs == 0 {
		c.CloseGraceSecs = DefaultCloseGraceSecs
	}
	if c.DB == MemoryDB {
		c.DB = ""
	}
	return c
}

// validate reports every problem of c at once in one *run.Error with code invalid_request; each
// problem starts with the field's JSON name (e.g. `remotes.unreal.url: …`). The sections are
// checked in this order, each adding its problems to one list: the database, env_allow, the
// durations, the limits, the policy defaults, tool_pools, openlineage, tracing, each remote by
// name, then each resource by name.
func (c Config) validate() error {
	var ps configProblems
	c.checkDatabase(&ps)
	c.checkEnvAllow(&ps)
	c.checkDurations(&ps)
	c.checkLimits(&ps)
	if len(c.Env) > 0 {
		var env map[string]any
		if err := json.Unmarshal(c.Env, &env); err != nil || env == nil {
			ps.add("env", "must be a JSON object such as {\"dcc\": \"maya\", \"version\": \"2025.3\"}; got %s", previewJSON(c.Env))
		}
	}
	if _, dps := c.Defaults.specDefaults(); dps != nil {
		ps = append(ps, dps...)
	}
	c.checkToolPools(&ps)
	c.OpenLineage.check(&ps)
	c.Tracing.check(&ps)
	for _, name := range slices.Sorted(maps.Keys(c.Remotes)) {
		c.Remotes[name].check("remotes."+name, name, &ps)
		c.checkPoolResources("remotes."+name, c.Remotes[name], &ps)
	}
	c.checkResources(&ps)
	if len(ps) == 0 {
		return nil
	}
	problems := []string(ps)
	return &run.Error{Code: run.CodeInvalidRequest, Message: "invalid engine config: " + strings.Join(problems, "; "),
		Details: map[string]any{"problems": problems}}
}

// configProblems are the problems of a Config, "field: message" each, in the order found.
type configProblems []string

// add appends the problem of field.
func (ps *configProblems) add(field, format string, args ...any) {
	*ps = append(*ps, field+": "+fmt.Sprintf(format, args...))
}

// checkDatabase checks read_only and db: read_only needs a database, and db names a file, not
// a folder.
func (c Config) checkDatabase(ps *configProblems) {
	if c.ReadOnly && c.DB == "" {
		ps.add("read_only", "needs a database file in db (an in-memory engine has nothing to read)")
	}
	if c.DB != "" {
		if fi, err := os.Stat(c.DB); err == nil && fi.IsDir() {
			ps.add("db", "%q is a folder; give the path of a database file such as %q", c.DB, filepath.Join(c.DB, "flow.db"))
		}
	}
}

// checkEnvAllow checks that every env_allow entry is a path.Match pattern.
func (c Config) checkEnvAllow(ps *configProblems) {
	for i, p := range c.EnvAllow {
		if !exec.ValidEnvPattern(p) {
			ps.add(fmt.Sprintf("env_allow[%d]", i), "%q is not a valid pattern (path.Match syntax, e.g. \"DCC_*\")", p)
		}
	}
}

// checkDurations checks the engine's durations: lease_secs, close_grace_secs,
// interrupt_grace_secs (0 = the default, else within their range) and stall_after_secs
// (finite).
func (c Config) checkDurations(ps *configProblems) {
	if c.LeaseSecs != 0 && !(c.LeaseSecs >= 0.3 && c.LeaseSecs <= 3600) {
		ps.add("lease_secs", "must be 0 (the default, %d) or 0.3 to 3600 seconds; got %v", DefaultLeaseSecs, c.LeaseSecs)
	}
	if c.CloseGraceSecs != 0 && !(c.CloseGraceSecs >= 0.01 && c.CloseGraceSecs <= 3600) {
		ps.add("close_grace_secs", "must be 0 (the default, %d) or 0.01 to 3600 seconds; got %v", DefaultCloseGraceSecs, c.CloseGraceSecs)
	}
	if c.InterruptGraceSecs != 0 && !(c.InterruptGraceSecs >= 0.01 && c.InterruptGraceSecs <= 300) {
		ps.add("interrupt_grace_secs", "must be 0 (the default, 2) or 0.01 to 300 seconds; got %v", c.InterruptGraceSecs)
	}
	if math.IsNaN(c.StallAfterSecs) || math.IsInf(c.StallAfterSecs, 0) {
		ps.add("stall_after_secs", "must be a finite number of seconds (0 = default, negative = off)")
	}
}

// checkLimits checks the executor's and JSONPath's limits: 0 (the default) or 1 to the
// ceiling of each.
func (c Config) checkLimits(ps *configProblems) {
	for _, l := range []struct {
		field      string
		v, ceiling int
		def        int
	}{
		{"max_foreach_items", c.MaxForeachItems, exec.MaxForeachItemsCeiling, exec.DefaultMaxForeachItems},
		{"max_files_per_step", c.MaxFilesPerStep, exec.MaxFilesPerStepCeiling, exec.DefaultMaxFilesPerStep},
		{"jsonpath_max_results", c.JSONPathMaxResults, expr.MaxResultsCeiling, expr.DefaultMaxResults},
		{"jsonpath_max_work", c.JSONPathMaxWork, expr.MaxWorkCeiling, expr.DefaultMaxWork},
		{"max_depth", c.MaxDepth, exec.MaxDepthCeiling, exec.DefaultMaxDepth},
		{"max_tree_runs", c.MaxTreeRuns, exec.MaxTreeRunsCeiling, exec.DefaultMaxTreeRuns},
		{"max_tree_instances", c.MaxTreeInstances, exec.MaxTreeInstancesCeiling, exec.DefaultMaxTreeInstances},
		{"max_tree_parallel", c.MaxTreeParallel, exec.MaxTreeParallelCeiling, exec.DefaultMaxTreeParallel},
	} {
		if l.v < 0 || l.v > l.ceiling {
			ps.add(l.field, "must be 0 (the default, %s) or 1 to %s; got %d", expr.Thousands(l.def), expr.Thousands(l.ceiling), l.v)
		}
	}
}

// checkResources checks each declared resource, by name: its name is as a step id, and its
// limit is 1 to spec.MaxResourceAmount.
func (c Config) checkResources(ps *configProblems) {
	for _, name := range slices.Sorted(maps.Keys(c.Resources)) {
		f := "resources." + name
		if !remoteNameRe.MatchString(name) {
			ps.add(f, "resource names must start with a letter or _ and contain only letters, digits, _ and - (at most 64), e.g. houdini")
		}
		if l := c.Resources[name].Limit; l < 1 || l > spec.MaxResourceAmount {
			got := strconv.Itoa(l)
			if l == 0 {
				got = "none (or 0)" // a resource given without its limit: {"gpu": {}}
			}
			ps.add(f+".limit", "must be 1 to %s (the units the steps hold at once, e.g. the licences the studio owns); got %s; remove the resource to leave it unlimited",
				expr.Thousands(spec.MaxResourceAmount), got)
		}
		if p := c.Resources[name].Probe; p != nil {
			p.check(f+".probe", name, ps)
		}
	}
}

// checkPoolResources checks the resources of remote r (field f): a pool of processes only, each
// name one the engine declares (a suggestion for a misspelt one) and each amount 1 to its limit.
func (c Config) checkPoolResources(f string, r RemoteConfig, ps *configProblems) {
	if len(r.Resources) == 0 {
		return
	}
	if len(r.Command) == 0 || !r.pooled() {
		ps.add(f+".resources", "applies to pools of processes (command with workers), whose each worker holds the units while it lives; give the steps or tools their resources otherwise")
		return
	}
	limits := c.resourceLimits()
	declared := slices.Sorted(maps.Keys(limits))
	for _, name := range slices.Sorted(maps.Keys(r.Resources)) {
		amount, field := r.Resources[name], f+".resources."+name
		limit, ok := limits[name]
		switch {
		case !ok && len(declared) == 0:
			ps.add(field, "the engine declares no resources: declare it (resources: {%s: {limit: N}}) or remove it from the pool", name)
		case !ok:
			hint := ""
			if sug := yamltext.Suggest(name, declared); sug != "" {
				hint = fmt.Sprintf("did you mean %q? ", sug)
			}
			ps.add(field, "the engine does not declare %q: %sit declares %s; declare it (resources: {%s: {limit: N}}) or remove it from the pool", name, hint, quoteNames(declared), name)
		case amount < 1 || amount > limit:
			ps.add(field, "must be 1 to the engine's limit of %q, %d; got %d", name, limit, amount)
		}
	}
}

// checkToolPools checks tool_pools, by pattern: each key is a path.Match pattern and names a
// configured remote (on a shared database, any remote: another engine may have it).
func (c Config) checkToolPools(ps *configProblems) {
	for _, pattern := range slices.Sorted(maps.Keys(c.ToolPools)) {
		f := fmt.Sprintf("tool_pools[%q]", pattern)
		if _, err := path.Match(pattern, ""); err != nil || pattern == "" {
			ps.add(f, "%q is not a valid pattern (path.Match syntax, e.g. \"maya__*\")", pattern)
		}
		if pool := c.ToolPools[pattern]; pool == "" {
			ps.add(f, "names no remote; give the name of one of remotes")
		} else if _, ok := c.Remotes[pool]; !ok && !storeopen.IsURL(c.DB) {
			// On a shared database another engine may have it (checked at submit).
			ps.add(f, "remote %q is not configured in remotes", pool)
		}
	}
}

// check checks the remote called name, whose problems start with f ("remotes.NAME"): its name,
// its endpoint (checkEndpoint), then the fields of each kind of remote (checkKindFields).
func (r RemoteConfig) check(f, name string, ps *configProblems) {
	if !remoteNameRe.MatchString(name) {
		ps.add(f, "remote names must start with a letter or _ and contain only letters, digits, _ and - (at most 64)")
	}
	r.checkEndpoint(f, ps)
	r.checkKindFields(f, ps)
}

// checkEndpoint checks how the remote is reached: one url, a list of URLs (each http or https,
// none twice) or a command, and workers_per_url (a pool of servers only) and timeout_secs.
func (r RemoteConfig) checkEndpoint(f string, ps *configProblems) {
	hasURL := r.URL != "" || len(r.URLs) > 0
	switch {
	case r.URL != "" && len(r.URLs) > 0:
		ps.add(f+".url", "URL and URLs are mutually exclusive: set one")
	case hasURL && len(r.Command) > 0:
		ps.add(f+".url", "url and command are mutually exclusive: set one")
	case !hasURL && len(r.Command) == 0:
		ps.add(f+".url", "one of url (streamable HTTP) or command (stdio) is required")
	case r.URL != "" && !strings.HasPrefix(r.URL, "http://") && !strings.HasPrefix(r.URL, "https://"):
		ps.add(f+".url", "must be an http:// or https:// URL; got %q", r.URL)
	}
	seen := map[string]bool{}
	for i, u := range r.URLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			ps.add(fmt.Sprintf("%s.url[%d]", f, i), "must be an http:// or https:// URL; got %q", u)
		} else if seen[u] {
			ps.add(fmt.Sprintf("%s.url[%d]", f, i), "%q appears twice; a server that serves more calls at a time takes workers_per_url", u)
		}
		seen[u] = true
	}
	if r.WorkersPerURL < 0 || r.WorkersPerURL > remote.MaxWorkers {
		ps.add(f+".workers_per_url", "must be 0 or 1 to %d; got %d", remote.MaxWorkers, r.WorkersPerURL)
	} else if r.WorkersPerURL != 0 && len(r.URLs) == 0 {
		ps.add(f+".workers_per_url", "applies to a pool of servers only: give url as a list of URLs")
	}
	if r.TimeoutSecs < 0 || math.IsNaN(r.TimeoutSecs) || math.IsInf(r.TimeoutSecs, 0) {
		ps.add(f+".timeout_secs", "must be ≥ 0 (0 = no limit); got %v", r.TimeoutSecs)
	}
}

// checkKindFields checks that the fields of one kind of remote are not set on another (headers
// and token_env for url remotes, env and dir for command remotes, the pool fields for pools of
// processes) and the ranges of the pool fields.
func (r RemoteConfig) checkKindFields(f string, ps *configProblems) {
	hasURL := r.URL != "" || len(r.URLs) > 0
	if !hasURL && (len(r.Headers) > 0 || r.TokenEnv != "") {
		ps.add(f+".headers", "headers and token_env apply to url remotes only")
	}
	if len(r.Command) == 0 && (len(r.Env) > 0 || r.Dir != "") {
		ps.add(f+".env", "env and dir apply to command remotes only")
	}
	switch {
	case len(r.URLs) > 0 && (r.Workers != 0 || r.RecycleAfterCalls != 0 || r.MaxRSSMB != 0 || r.KillAfterSecs != 0):
		ps.add(f+".workers", "workers, recycle_after_calls, max_rss_mb and kill_after_secs apply to pools of processes (command); a pool of servers (url as a list) takes workers_per_url, start_timeout_secs and idle_stop_secs")
	case r.URL != "" && r.pooled():
		ps.add(f+".workers", "pool fields (workers, recycle_after_calls, max_rss_mb, start_timeout_secs, idle_stop_secs, kill_after_secs) apply to command remotes; for a pool of servers give url as a list of URLs")
	}
	for _, n := range []struct {
		field  string
		v, max int
	}{{"workers", r.Workers, remote.MaxWorkers}, {"recycle_after_calls", r.RecycleAfterCalls, remote.MaxRecycleAfterCalls},
		{"max_rss_mb", r.MaxRSSMB, remote.MaxRSSMBCeiling}} {
		if n.v < 0 || n.v > n.max {
			ps.add(f+"."+n.field, "must be 0 or 1 to %s; got %d", expr.Thousands(n.max), n.v)
		}
	}
	for _, d := range []struct {
		field string
		v     float64
		zero  string
	}{{"start_timeout_secs", r.StartTimeoutSecs, "30 s"}, {"idle_stop_secs", r.IdleStopSecs, "never"},
		{"kill_after_secs", r.KillAfterSecs, "10 s"}} {
		if d.v != 0 && !(d.v >= remote.MinDuration.Seconds() && d.v <= remote.MaxDuration.Seconds()) {
			ps.add(f+"."+d.field, "must be 0 (%s) or 0.1 to 604800 seconds; got %v", d.zero, d.v)
		}
	}
}

// previewJSON is the start of b for a message: at most 60 bytes.
func previewJSON(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}
