package main

import (
	"encoding/json"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// TestServeStartRacingEngineClose starts servers while the engine closes, many times over: a
// server that dccflow_serve_start reports as started must be stopped by dccflow_engine_close, so
// its port refuses connections once both have returned. (Servers kept in a table beside the
// handle's could be started after close had stopped them: a listener left running on a closed
// engine.)
func TestServeStartRacingEngineClose(t *testing.T) {
	t.Parallel()
	const rounds = 200
	started := 0
	for i := 0; i < rounds; i++ {
		h := uint64(mustOp(t, 0, opEngineOpen, `{"config": {}}`)["handle"].(float64))
		var wg sync.WaitGroup
		var out []byte
		var rc int32
		wg.Add(2)
		go func() {
			defer wg.Done()
			out, rc = dispatch(h, []byte(`{"mcp": "http://127.0.0.1:0", "webhooks": "127.0.0.1:0", "ui": "127.0.0.1:0"}`), opServeStart)
		}()
		go func() {
			defer wg.Done()
			if i%2 == 1 {
				time.Sleep(time.Duration(i%7) * 20 * time.Microsecond)
			}
			dispatch(h, nil, opEngineClose)
		}()
		wg.Wait()
		if rc != rcOK {
			continue // the engine was closed first: stale_handle
		}
		started++
		var res map[string]any // the addresses, and the retention started
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("serve_start: %s: %v", out, err)
		}
		webhooks, _ := res["webhooks_addr"].(string)
		mcpURL, _ := res["mcp_url"].(string)
		uiURL, _ := res["ui_url"].(string)
		addrs := []string{webhooks}
		for _, s := range []string{mcpURL, uiURL} {
			if u, err := url.Parse(s); err == nil && u.Host != "" {
				addrs = append(addrs, u.Host)
			}
		}
		for _, addr := range addrs {
			if addr == "" {
				continue
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Fatalf("round %d: %s still accepts connections after engine_close (serve_start gave %s)", i, addr, out)
			}
		}
	}
	t.Logf("%d of %d rounds started servers before the close", started, rounds)
}
