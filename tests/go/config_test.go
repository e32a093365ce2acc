package gotest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

func TestConfigDefaultsAndJSON(t *testing.T) {
	t.Parallel()
	c := engine.Config{}.WithDefaults()
	if c.StallAfterSecs != engine.DefaultStallAfterSecs || c.DB != "" {
		t.Fatalf("defaults %+v", c)
	}
	if got := (engine.Config{DB: engine.MemoryDB, StallAfterSecs: -1}).WithDefaults(); got.DB != "" || got.StallAfterSecs != -1 {
		t.Fatalf("explicit values are kept: %+v", got)
	}
	var fromJSON engine.Config
	if err := json.Unmarshal([]byte(`{"env_allow":["DCC_*"],"stall_after_secs":12,"seed":7,
		"remotes":{"unreal":{"url":"http://127.0.0.1:8765/mcp","headers":{"X-A":"b"},"token_env":"UE_TOKEN","timeout_secs":30}}}`), &fromJSON); err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(context.Background(), fromJSON)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	if got := eng.Config(); got.Remotes["unreal"].TimeoutSecs != 30 || got.Seed != 7 || got.EnvAllow[0] != "DCC_*" {
		t.Fatalf("config %+v", got)
	}
}

func TestConfigValidationNamesEveryField(t *testing.T) {
	t.Parallel()
	cfg := engine.Config{
		DB:       t.TempDir(), // a folder, not a database file
		EnvAllow: []string{"DCC_*", "[bad"},
		Remotes: map[string]engine.RemoteConfig{
			"both":     {URL: "http://x", Command: []string{"srv"}},
			"neither":  {},
			"ftp":      {URL: "ftp://x", TimeoutSecs: -1},
			"bad name": {Command: []string{"srv"}, Headers: map[string]string{"a": "b"}},
		},
	}
	_, err := engine.Open(context.Background(), cfg)
	re := asRunError(err)
	if re == nil || re.Code != run.CodeInvalidRequest {
		t.Fatalf("err %v", err)
	}
	mustContain(t, "message", re.Message,
		"db:", "env_allow[1]:", "remotes.both.url:", "remotes.neither.url:", "remotes.ftp.url:",
		"remotes.ftp.timeout_secs:", "remotes.bad name:", "remotes.bad name.headers:")
	if n := len(re.Details["problems"].([]string)); n != 8 {
		t.Fatalf("%d problems: %v", n, re.Details["problems"])
	}
}
