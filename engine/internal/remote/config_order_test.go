package remote

import (
	"strings"
	"testing"
	"time"
)

// Validate reports every problem of a remote at once, section after section: the kind of
// remote (url, urls or command), the URLs, workers_per_url, the HTTP fields, the command and the
// fields of the other kind, env, the timeout, the pool fields' ranges, then the pool fields
// that do not apply. The test pins whole lists (one header and one env entry each: maps are
// checked in no fixed order), so that the sections can be rearranged in code without changing
// what a user reads.
func TestConfigValidateReportsEverySectionInOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"urls", Config{URL: "http://a", URLs: []string{"ftp://b", "http://c/mcp", "http://c/mcp"}, WorkersPerURL: 999,
			Headers: map[string]string{"Bad Header": "x"}, TokenEnv: "A=B", Env: map[string]string{"": "v"}, Dir: "/x",
			Timeout: -1, Workers: -1, RecycleAfterCalls: 5, StartTimeout: time.Nanosecond},
			[]string{
				"url: url and urls are mutually exclusive: set one",
				"url[0]: scheme must be http or https, not \"ftp\"",
				"url[2]: \"http://c/mcp\" appears twice; a server serving more calls at a time takes workers_per_url",
				"workers_per_url: must be 0 or 1 to 256, got 999",
				"headers: invalid header name \"Bad Header\"",
				"token_env: invalid environment variable name \"A=B\"",
				"env: only valid with command, not with url",
				"dir: only valid with command, not with url",
				"env: invalid environment variable name \"\"",
				"timeout: must not be negative, got -1ns",
				"workers: must be 0 or 1 to 256, got -1",
				"start_timeout: must be 0 or 100ms to 168h0m0s, got 1ns",
				"workers: workers, recycle_after_calls, max_rss_mb and kill_after apply to pools of processes (command); a pool of servers takes workers_per_url, start_timeout and idle_stop",
			}},
		{"command", Config{Command: []string{" "}, Headers: map[string]string{"authorization": "x"}, TokenEnv: "T",
			WorkersPerURL: 2, MaxRSSMB: -1, KillAfter: 8 * 24 * time.Hour},
			[]string{
				"workers_per_url: applies to a pool of servers only (url given as a list)",
				"headers: Authorization is set by token_env; do not set both",
				"command: the program (command[0]) is empty",
				"headers: only valid with url, not with command",
				"token_env: only valid with url, not with command",
				"max_rss_mb: must be 0 or 1 to 1048576, got -1",
				"kill_after: must be 0 or 100ms to 168h0m0s, got 192h0m0s",
			}},
		{"one url", Config{URL: "http:///mcp", Workers: 2, IdleStop: time.Second}, []string{
			"url: host is missing in \"http:///mcp\"",
			"workers: pool fields (workers, recycle_after_calls, max_rss_mb, start_timeout, idle_stop, kill_after) apply to command remotes and to a list of URLs, not to a single url: for a pool of servers give urls",
		}},
		{"neither", Config{Timeout: -time.Second, RecycleAfterCalls: MaxRecycleAfterCalls + 1}, []string{
			"url: one of url (streamable HTTP) or command (stdio) is required",
			"timeout: must not be negative, got -1s",
			"recycle_after_calls: must be 0 or 1 to 1000000, got 1000001",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if err == nil {
				t.Fatal("Validate() = nil")
			}
			if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
