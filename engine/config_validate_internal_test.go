package engine

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Config.validate reports every problem of every section at once, in one order: the database,
// env_allow, the durations, the limits, the policy defaults, tool_pools, openlineage, each
// remote by name (its endpoint, its URLs, its pool of servers, its timeout, the fields of the other kind
// of remote, its pool of processes), then each resource by name. The test pins the whole list, so that the sections can be
// rearranged in code without changing what a user reads.
func TestConfigValidateReportsEverySectionInOrder(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{
		DB:                 dir, // a folder
		EnvAllow:           []string{"DCC_*", "[bad"},
		LeaseSecs:          0.1,
		CloseGraceSecs:     4000,
		InterruptGraceSecs: -1,
		StallAfterSecs:     math.Inf(1),
		MaxForeachItems:    -1,
		MaxTreeParallel:    2_000_000,
		Defaults:           &PolicyDefaults{TimeoutSecs: math.NaN()},
		ToolPools:          map[string]string{"maya__*": "", "[x": "nowhere"},
		OpenLineage:        &OpenLineageConfig{URL: "ftp://x", QueueSize: -1},
		Remotes: map[string]RemoteConfig{
			"bad name": {Command: []string{"srv"}, Headers: map[string]string{"a": "b"}, Workers: -1, KillAfterSecs: 0.01},
			"farm":     {URLs: []string{"http://a/mcp", "http://a/mcp", "ftp://b"}, WorkersPerURL: 300, Workers: 2, TimeoutSecs: -1},
			"one":      {URL: "ftp://x", WorkersPerURL: 2, Env: map[string]string{"A": "1"}, StartTimeoutSecs: 5},
		},
		Resources: map[string]ResourceConfig{"gpu": {Limit: 0}, "bad name": {Limit: 2_000_000}, "houdini": {Limit: -1}, "nuke": {Limit: 10}},
	}
	err := cfg.validate()
	var re *run.Error
	if !errors.As(err, &re) || re.Code != run.CodeInvalidRequest {
		t.Fatalf("validate: %v", err)
	}
	want := []string{
		fmt.Sprintf(`db: %q is a folder; give the path of a database file such as %q`, dir, filepath.Join(dir, "flow.db")), // %q: Windows' backslashes
		`env_allow[1]: "[bad" is not a valid pattern (path.Match syntax, e.g. "DCC_*")`,
		`lease_secs: must be 0 (the default, 15) or 0.3 to 3600 seconds; got 0.1`,
		`close_grace_secs: must be 0 (the default, 10) or 0.01 to 3600 seconds; got 4000`,
		`interrupt_grace_secs: must be 0 (the default, 2) or 0.01 to 300 seconds; got -1`,
		`stall_after_secs: must be a finite number of seconds (0 = default, negative = off)`,
		`max_foreach_items: must be 0 (the default, 100,000) or 1 to 10,000,000; got -1`,
		`max_tree_parallel: must be 0 (the default, 1,000) or 1 to 1,000,000; got 2000000`,
		`defaults.timeout_secs: must be a finite number of seconds`,
		`tool_pools["[x"]: "[x" is not a valid pattern (path.Match syntax, e.g. "maya__*")`,
		`tool_pools["[x"]: remote "nowhere" is not configured in remotes`,
		`tool_pools["maya__*"]: names no remote; give the name of one of remotes`,
		`openlineage.url: url "ftp://x" has scheme "ftp": use http:// or https:// (e.g. http://localhost:5000/api/v1/lineage)`,
		`openlineage.queue_size: must be 0 (the default, 1,000) or 1 to 1,000,000 events; got -1`,
		`remotes.bad name: remote names must start with a letter or _ and contain only letters, digits, _ and - (at most 64)`,
		`remotes.bad name.headers: headers and token_env apply to url remotes only`,
		`remotes.bad name.workers: must be 0 or 1 to 256; got -1`,
		`remotes.bad name.kill_after_secs: must be 0 (10 s) or 0.1 to 604800 seconds; got 0.01`,
		`remotes.farm.url[1]: "http://a/mcp" appears twice; a server that serves more calls at a time takes workers_per_url`,
		`remotes.farm.url[2]: must be an http:// or https:// URL; got "ftp://b"`,
		`remotes.farm.workers_per_url: must be 0 or 1 to 256; got 300`,
		`remotes.farm.timeout_secs: must be ≥ 0 (0 = no limit); got -1`,
		`remotes.farm.workers: workers, recycle_after_calls, max_rss_mb and kill_after_secs apply to pools of processes (command); a pool of servers (url as a list) takes workers_per_url, start_timeout_secs and idle_stop_secs`,
		`remotes.one.url: must be an http:// or https:// URL; got "ftp://x"`,
		`remotes.one.workers_per_url: applies to a pool of servers only: give url as a list of URLs`,
		`remotes.one.env: env and dir apply to command remotes only`,
		`remotes.one.workers: pool fields (workers, recycle_after_calls, max_rss_mb, start_timeout_secs, idle_stop_secs, kill_after_secs) apply to command remotes; for a pool of servers give url as a list of URLs`,
		`resources.bad name: resource names must start with a letter or _ and contain only letters, digits, _ and - (at most 64), e.g. houdini`,
		`resources.bad name.limit: must be 1 to 1,000,000 (the units the steps hold at once, e.g. the licences the studio owns); got 2000000; remove the resource to leave it unlimited`,
		`resources.gpu.limit: must be 1 to 1,000,000 (the units the steps hold at once, e.g. the licences the studio owns); got none (or 0); remove the resource to leave it unlimited`,
		`resources.houdini.limit: must be 1 to 1,000,000 (the units the steps hold at once, e.g. the licences the studio owns); got -1; remove the resource to leave it unlimited`,
	}
	got := re.Details["problems"].([]string)
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))

	}

	// read_only needs a database: a problem only when db is empty, so the db check is silent.
	err = Config{ReadOnly: true, LeaseSecs: -1}.validate()
	if !errors.As(err, &re) {
		t.Fatalf("validate: %v", err)
	}
	want = []string{
		`read_only: needs a database file in db (an in-memory engine has nothing to read)`,
		`lease_secs: must be 0 (the default, 15) or 0.3 to 3600 seconds; got -1`,
	}
	if got := re.Details["problems"].([]string); !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
