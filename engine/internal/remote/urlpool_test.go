package remote

import (
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// urlPool is a pool "srv" of the streamable HTTP servers at urls (real tests/mcpserver
// processes, or addresses nobody listens on), each serving perURL calls at a time.
func urlPool(t *testing.T, perURL int, urls ...string) *bundle {
	t.Helper()
	pool, err := NewPool(map[string]Config{"srv": {URLs: urls, WorkersPerURL: perURL}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &bundle{pool: pool}
}

// deadURL is an http URL of a loopback port nobody listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/mcp"
}

func pidOfServer(t *testing.T, res Result) (int, string) {
	t.Helper()
	if res.IsError {
		t.Fatalf("call failed: %s: %s", res.Kind, res.Message)
	}
	out, _ := res.Output.(map[string]any)
	pid, err := out["pid"].(json.Number).Int64()
	if err != nil || res.Worker == nil || res.Worker.URL == "" || res.Worker.PID != 0 || res.Worker.Pool != "srv" {
		t.Fatalf("output %#v, worker %+v: want a pid and srv/URL", res.Output, res.Worker)
	}
	return int(pid), res.Worker.URL
}

// Two servers serving 2 calls each: 8 sleeps of 300 ms run 4 at a time, 4 on each server,
// each call on a session of its own; Pools lists the 4 sessions with their URL and no pid.
func TestURLPoolSpreadsCallsOverItsServers(t *testing.T) {
	a := startHTTPServer(t, "127.0.0.1:0")
	b := startHTTPServer(t, "127.0.0.1:0")
	p := urlPool(t, 2, a.url, b.url)
	var mu sync.Mutex
	perURL := map[string]int{}
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			res := p.call(t, nil, "sleep", map[string]any{"ms": 300})
			if res.IsError || res.Worker == nil || res.Worker.URL == "" {
				t.Errorf("sleep: %+v", res)
				return
			}
			mu.Lock()
			perURL[res.Worker.URL]++
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if perURL[a.url] != 4 || perURL[b.url] != 4 {
		t.Fatalf("calls per server: %v, want 4 on each", perURL)
	}
	if elapsed > 1500*time.Millisecond { // 4 at a time: 600 ms; one at a time: 2.4 s
		t.Errorf("8 × 300 ms on 2 servers × 2 took %v", elapsed)
	}
	info := p.pool.Pools()
	if len(info) != 1 || info[0].Max != 4 || len(info[0].Workers) != 4 || len(info[0].URLs) != 2 || info[0].Command != nil {
		t.Fatalf("Pools() = %+v", info)
	}
	for _, w := range info[0].Workers {
		if w.State != WorkerIdle || w.PID != 0 || (w.URL != a.url && w.URL != b.url) || w.Calls != 2 {
			t.Errorf("worker %+v: want idle, no pid, a URL, 2 calls", w)
		}
	}
}

// A member nobody listens on fails the call it was started for with worker_lost, naming the
// URL; the next call goes to the other member, and keeps going there.
func TestURLPoolMemberThatCannotBeReached(t *testing.T) {
	live := startHTTPServer(t, "127.0.0.1:0")
	dead := deadURL(t)
	p := urlPool(t, 1, dead, live.url) // the first call starts a session on dead
	res := p.call(t, nil, "count", nil)
	if res.Kind != run.KindWorkerLost || !strings.Contains(res.Message, "connecting to pool member "+dead) ||
		res.Worker == nil || res.Worker.URL != dead {
		t.Fatalf("first call: %+v", res)
	}
	for range 3 {
		if _, u := pidOfServer(t, p.call(t, nil, "count", nil)); u != live.url {
			t.Fatalf("a call went to %s, want the live member %s", u, live.url)
		}
	}
	if info := p.pool.Pools()[0]; len(info.Workers) != 1 || info.Workers[0].URL != live.url {
		t.Fatalf("Pools() = %+v", info)
	}
}

// A server that dies during a call fails it with worker_lost, naming the server; the retry goes
// to the other member, on another process.
func TestURLPoolServerLostMidCall(t *testing.T) {
	a := startHTTPServer(t, "127.0.0.1:0")
	b := startHTTPServer(t, "127.0.0.1:0")
	p := urlPool(t, 1, a.url, b.url)
	res := p.call(t, nil, "crash", nil) // on a: the first member
	if res.Kind != run.KindWorkerLost || res.Worker == nil || res.Worker.URL != a.url ||
		!strings.Contains(res.Message, "server "+a.url+" was lost during the call") {
		t.Fatalf("crash: %+v", res)
	}
	a.exited(t)
	if _, u := pidOfServer(t, p.call(t, nil, "count", nil)); u != b.url {
		t.Fatalf("the retry went to %s, want %s", u, b.url)
	}
	if info := p.pool.Pools()[0]; info.Lost != 1 {
		t.Fatalf("Pools() = %+v: want 1 lost", info)
	}
}

// A cancelled call on a server returns at once; the server's tool sees the cancellation, and
// the next call is served on a new session.
func TestURLPoolCancel(t *testing.T) {
	a := startHTTPServer(t, "127.0.0.1:0", "-log", t.TempDir()+"/events.log")
	p := urlPool(t, 1, a.url)
	ctx := p.cancelWhenBusy(t)
	start := time.Now()
	res := p.call(t, ctx, "sleep", map[string]any{"ms": 20000, "key": "c"})
	if res.Kind != run.KindCancelled || time.Since(start) > 5*time.Second {
		t.Fatalf("cancelled sleep: %+v after %v", res, time.Since(start))
	}
	if !p.await(t, "cancelled", "c", 5000) {
		t.Fatal("the server's tool did not see the cancellation")
	}
}

func TestURLPoolConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string // "" = valid
	}{
		{Config{URLs: []string{"http://a/mcp", "https://b/mcp"}, WorkersPerURL: 3, StartTimeout: time.Second, IdleStop: time.Minute}, ""},
		{Config{URLs: []string{"http://a/mcp", "ftp://b"}}, `url[1]: scheme must be http or https, not "ftp"`},
		{Config{URLs: []string{"http://a/mcp", "http://a/mcp"}}, `url[1]: "http://a/mcp" appears twice`},
		{Config{URLs: []string{"http://a/mcp"}, Workers: 2}, "workers: workers, recycle_after_calls, max_rss_mb and kill_after apply to pools of processes"},
		{Config{URLs: []string{"http://a/mcp"}, WorkersPerURL: MaxWorkers + 1}, "workers_per_url: must be 0 or 1 to 256, got 257"},
		{Config{URL: "http://a/mcp", WorkersPerURL: 2}, "workers_per_url: applies to a pool of servers only"},
		{Config{URL: "http://a/mcp", URLs: []string{"http://b/mcp"}}, "url: url and urls are mutually exclusive"},
		{Config{URL: "http://a/mcp", Workers: 2}, "for a pool of servers"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if got := (Config{URLs: []string{"http://a/mcp", "http://b/mcp"}, WorkersPerURL: 3}).workers(); got != 6 {
		t.Errorf("workers() = %d, want 6", got)
	}
}

// A pool member's URL may carry a secret (user:password@, ?token=): step records, messages and
// pool listings show it without (issue #33's review: they printed it whole).
func TestRedteamPoolURLSecretsAreNotShown(t *testing.T) {
	const secret = "s3cr3t-pass"
	dead := strings.Replace(deadURL(t), "http://", "http://ana:"+secret+"@", 1) + "?token=" + secret + "&v=1"
	live := startHTTPServer(t, "127.0.0.1:0")
	liveWithToken := live.url + "?token=" + secret
	p := urlPool(t, 1, dead, liveWithToken)
	res := p.call(t, nil, "count", nil)
	if res.Kind != run.KindWorkerLost || res.Worker == nil {
		t.Fatalf("first call: %+v", res)
	}
	if strings.Contains(res.Message, secret) || strings.Contains(res.Worker.String(), secret) {
		t.Fatalf("the secret is shown: %q, worker %q", res.Message, res.Worker.String())
	}
	if !strings.Contains(res.Message, "ana:xxxxx@") || !strings.Contains(res.Message, "token=xxxxx") {
		t.Errorf("the member is not named recognisably: %q", res.Message)
	}
	ok := p.call(t, nil, "count", nil)
	if ok.Worker == nil || strings.Contains(ok.Worker.String(), secret) {
		t.Fatalf("second call's worker: %+v", ok.Worker)
	}
	for _, w := range p.pool.Pools()[0].Workers {
		if strings.Contains(w.URL, secret) {
			t.Fatalf("Pools() shows %q", w.URL)
		}
	}
}
