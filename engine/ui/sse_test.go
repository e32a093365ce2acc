package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

// sseMessage is one message of the event stream, with when it arrived.
type sseMessage struct {
	event, id, data string
	at              time.Time
}

// stream reads /api/events?query until ctx ends, sending each message on the returned channel.
func (b *bench) stream(t *testing.T, ctx context.Context, query string) <-chan sseMessage {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", b.srv.URL+"/api/events"+query, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %v", res.StatusCode, res.Header)
	}
	out := make(chan sseMessage, 10000)
	go func() {
		defer res.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var m sseMessage
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m.event != "" {
					m.at = time.Now()
					out <- m
				}
				m = sseMessage{}
			case strings.HasPrefix(line, "event: "):
				m.event = line[7:]
			case strings.HasPrefix(line, "id: "):
				m.id = line[4:]
			case strings.HasPrefix(line, "data: "):
				m.data = line[6:]
			}
		}
	}()
	return out
}

// sentLog records when the handler wrote each "run" message of each event stream, by the
// stream's query, on the server's side of the connection: a client's read times say nothing of
// the spacing (a reader goroutine starved on a loaded machine reads two messages sent 250 ms
// apart back to back).
type sentLog struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (l *sentLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&timedWriter{ResponseWriter: w, log: l, query: r.URL.RawQuery}, r)
	})
}

func (l *sentLog) times(query string) []time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at[query]...)
}

// timedWriter notes the start of each write of a "run" message (writeEvent writes a message in
// one Write); Unwrap lets http.ResponseController flush and set deadlines through it.
type timedWriter struct {
	http.ResponseWriter
	log   *sentLog
	query string
}

func (w *timedWriter) Write(p []byte) (int, error) {
	if strings.HasPrefix(string(p), "event: run\n") {
		w.log.mu.Lock()
		if w.log.at == nil {
			w.log.at = map[string][]time.Time{}
		}
		w.log.at[w.query] = append(w.log.at[w.query], time.Now())
		w.log.mu.Unlock()
	}
	return w.ResponseWriter.Write(p)
}

func (w *timedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// bigForeach is a workflow of one foreach over n items.
func bigForeach(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = strconv.Itoa(i)
	}
	return `
name: big
steps:
  - id: per_item
    kind: foreach
    items: [` + strings.Join(items, ",") + `]
    concurrency: 8
    steps:
      - {id: work, tool: flow__sleep, args: {ms: 4}}
`
}

// A foreach of 2,000 items writes thousands of events; the stream sends at most one run message
// per run per coalescing interval, the step messages are bounded per interval, and the last run
// message is the finished run.
func TestEventsAreCoalesced(t *testing.T) {
	const every = 250 * time.Millisecond
	sent := &sentLog{}
	e := newEngine(t, filepath.Join(t.TempDir(), "flow.db"))
	srv := httptest.NewServer(sent.wrap(ui.Handler(e, ui.Options{Coalesce: every})))
	t.Cleanup(srv.Close)
	b := &bench{e: e, srv: srv, csrf: "c0ffee"}
	if err := b.e.Register(mustSpec(t, bigForeach(2000))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all := b.stream(t, ctx, "")
	start := time.Now()
	id := b.submit(t, "big", nil)
	one := b.stream(t, ctx, "?run="+id+"&from=1")
	if _, err := b.e.Wait(ctx, id, time.Minute); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	evs, _ := b.e.PollEvents(ctx, engine.EventQuery{RunID: id, Max: 100000}, 0)

	collect := func(ch <-chan sseMessage) []sseMessage {
		var got []sseMessage
		timeout := time.After(3 * every)
		for {
			select {
			case m := <-ch:
				got = append(got, m)
				if m.event == "run" && strings.Contains(m.data, `"status":"completed"`) {
					return got
				}
			case <-timeout:
				return got
			}
		}
	}
	queries := map[string]string{"all runs": "", "one run": "run=" + id + "&from=1"}
	for name, got := range map[string][]sseMessage{"all runs": collect(all), "one run": collect(one)} {
		var runMsgs, stepMsgs []sseMessage
		for _, m := range got {
			switch m.event {
			case "run":
				runMsgs = append(runMsgs, m)
			case "step":
				stepMsgs = append(stepMsgs, m)
			}
		}
		if len(runMsgs) == 0 {
			t.Fatalf("%s: no run message", name)
		}
		var last ui.RunSummary
		if err := json.Unmarshal([]byte(runMsgs[len(runMsgs)-1].data), &last); err != nil {
			t.Fatal(err)
		}
		if last.ID != id || last.Status != run.StatusCompleted || last.Progress.Completed != last.Progress.Total || last.Progress.Total < 2000 {
			t.Errorf("%s: last run message %+v", name, last)
		}
		// At most one run message per interval (with slack for the first and last tick).
		if max := int(elapsed/every) + 3; len(runMsgs) > max {
			t.Errorf("%s: %d run messages in %v (%d events), want at most %d", name, len(runMsgs), elapsed, len(evs), max)
		}
		// The spacing as the server wrote them (sentLog), not as the client read them.
		at := sent.times(queries[name])
		if len(at) < len(runMsgs) {
			t.Errorf("%s: the server wrote %d run messages, the client read %d", name, len(at), len(runMsgs))
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap < every/2 {
				t.Errorf("%s: run messages %d and %d written only %v apart", name, i-1, i, gap)
				break
			}
		}
		if name == "all runs" && len(stepMsgs) > 0 {
			t.Errorf("the all-runs stream sent %d step messages", len(stepMsgs))
		}
		if name == "one run" {
			if len(stepMsgs) == 0 {
				t.Error("the run's stream sent no step message")
			}
			// At most 200 step messages per interval (TestCoalescerBoundsMessages checks one
			// flush exactly; this is the whole stream).
			if max := (int(elapsed/every) + 3) * 200; len(stepMsgs) > max {
				t.Errorf("%d step messages in %v: more than 200 per %v", len(stepMsgs), elapsed, every)
			}
			perKey := map[string]int{}
			for _, m := range stepMsgs {
				var sc ui.StepChange
				_ = json.Unmarshal([]byte(m.data), &sc)
				perKey[sc.Key]++
			}
			for k, n := range perKey {
				if n > int(elapsed/every)+3 {
					t.Errorf("step %s: %d messages", k, n)
				}
			}
		}
		t.Logf("%s: %d events → %d run and %d step messages in %v", name, len(evs), len(runMsgs), len(stepMsgs), elapsed)
	}
}

// The stream ends when the server closes, and Close does not wait for open streams.
func TestCloseEndsTheStreams(t *testing.T) {
	e := newEngine(t, "")
	s, err := ui.Serve(e, "127.0.0.1:0", ui.Options{Heartbeat: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(s.URL() + "api/events")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	beats := 0
	beating := make(chan struct{})
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if sc.Text() == ": heartbeat" {
				if beats++; beats == 1 {
					close(beating)
				}
			}
		}
	}()
	select { // the stream is open and beating (a fixed sleep saw none on a loaded machine)
	case <-beating:
	case <-time.After(10 * time.Second):
		t.Error("no heartbeat within 10 s (every 50 ms)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	wg.Wait()
	if err := s.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
