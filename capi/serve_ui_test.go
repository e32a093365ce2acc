package main

import (
	"net/http"
	"strings"
	"testing"
)

// serve_start {"ui"} serves the dashboard and answers its URL (also in serve_status); off
// loopback it needs the token; serve_stop stops it.
func TestServeStartUI(t *testing.T) {
	t.Parallel()
	h := uint64(mustOp(t, 0, opEngineOpen, `{"config": {}}`)["handle"].(float64))
	defer dispatch(h, nil, opEngineClose)
	out, rc := dispatch(h, []byte(`{"ui": "0.0.0.0:0"}`), opServeStart)
	if rc == rcOK || !strings.Contains(string(out), `"code":"invalid_input"`) || !strings.Contains(string(out), "--token") {
		t.Fatalf("off loopback without a token: rc %d %s", rc, out)
	}
	res := mustOp(t, h, opServeStart, `{"ui": "127.0.0.1:0", "retention": "forever"}`)
	url, _ := res["ui_url"].(string)
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/") {
		t.Fatalf("ui_url %q in %v", url, res)
	}
	if st := mustOp(t, h, opServeStatus, `{}`); st["ui_url"] != url {
		t.Errorf("serve_status %v", st)
	}
	resp, err := http.Get(url + "api/runs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /api/runs: %d", resp.StatusCode)
	}
	// A second serve_start answers the running one.
	if again := mustOp(t, h, opServeStart, `{"ui": "127.0.0.1:0"}`); again["ui_url"] != url {
		t.Errorf("second serve_start: %v", again)
	}
	mustOp(t, h, opServeStop, `{}`)
	if _, err := http.Get(url); err == nil {
		t.Error("the dashboard still answers after serve_stop")
	}
}
