package engine

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// "url" is a string (one server) or a list (a pool of servers); the rest of a remote's object
// stays strict.
func TestRemoteConfigURLJSON(t *testing.T) {
	t.Parallel()
	var cfg Config
	doc := `{"remotes": {
		"one": {"url": "http://127.0.0.1:8001/mcp", "timeout_secs": 5},
		"farm": {"url": ["http://127.0.0.1:8001/mcp", "http://127.0.0.1:8002/mcp"], "workers_per_url": 2, "token_env": "T"}}}`
	if err := json.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	one, farm := cfg.Remotes["one"], cfg.Remotes["farm"]
	if one.URL != "http://127.0.0.1:8001/mcp" || one.URLs != nil || one.TimeoutSecs != 5 {
		t.Fatalf("one = %+v", one)
	}
	if farm.URL != "" || !reflect.DeepEqual(farm.URLs, []string{"http://127.0.0.1:8001/mcp", "http://127.0.0.1:8002/mcp"}) ||
		farm.WorkersPerURL != 2 || farm.TokenEnv != "T" {
		t.Fatalf("farm = %+v", farm)
	}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	back, err := json.Marshal(cfg.Remotes)
	if err != nil {
		t.Fatal(err)
	}
	var again map[string]RemoteConfig
	if err := json.Unmarshal(back, &again); err != nil || !reflect.DeepEqual(again, cfg.Remotes) {
		t.Fatalf("round trip: %s → %+v (%v)", back, again, err)
	}

	for _, bad := range []struct{ doc, want string }{
		{`{"url": [], "workers_per_url": 1}`, "url: the list of URLs is empty"},
		{`{"url": ["http://a/mcp", 3]}`, "url: a list of URLs must hold strings only"},
		{`{"url": {"a": 1}}`, "url: must be a URL or a list of URLs"},
		{`{"url": "http://a/mcp", "wrkers": 2}`, `unknown field "wrkers"`},
	} {
		var r RemoteConfig
		if err := json.Unmarshal([]byte(bad.doc), &r); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: got %v, want %q", bad.doc, err, bad.want)
		}
	}

	invalid := Config{Remotes: map[string]RemoteConfig{
		"farm": {URLs: []string{"http://a/mcp", "http://a/mcp", "ftp://b"}, WorkersPerURL: 300, Workers: 2},
		"one":  {URL: "http://a/mcp", WorkersPerURL: 2},
	}}
	err = invalid.validate()
	for _, want := range []string{
		`remotes.farm.url[1]: "http://a/mcp" appears twice`, `remotes.farm.url[2]: must be an http:// or https:// URL`,
		"remotes.farm.workers_per_url: must be 0 or 1 to 256; got 300",
		"remotes.farm.workers: workers, recycle_after_calls, max_rss_mb and kill_after_secs apply to pools of processes",
		"remotes.one.workers_per_url: applies to a pool of servers only",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v\nwant %q", err, want)
		}
	}
}
