package ui_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

const gated = `
name: gated
description: prep, a human gate, push
inputs: {shot: {type: string, required: true}}
steps:
  - {id: prep, tool: flow__echo, args: {value: "{{inputs.shot}}"}}
  - {id: human_gate, kind: approve, prompt: "push {{inputs.shot}}?"}
  - {id: push, tool: flow__echo, args: {value: pushed}}
`

const slow = `
name: slow
steps:
  - {id: wait, tool: flow__sleep, args: {ms: 60000}}
`

const failing = `
name: failing
steps:
  - {id: ok, tool: flow__echo, args: {value: 1}}
  - {id: boom, tool: flow__fail, args: {message: "disk full on /proj"}}
`

const echo = `
name: echo
inputs: {value: {type: string, required: true}}
steps:
  - {id: say, tool: flow__echo, args: {value: "{{inputs.value}}"}}
`

// bench is a dashboard over an engine with the test workflows registered.
type bench struct {
	e   *engine.Engine
	srv *httptest.Server
	// csrf is the cookie/header value the client sends on POSTs.
	csrf  string
	token string
}

func newEngine(t testing.TB, db string) *engine.Engine {
	t.Helper()
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{DB: db, StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	for _, text := range []string{gated, slow, failing, echo} {
		s, err := spec.ParseString(text)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(s); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func newBench(t testing.TB, opts ui.Options) *bench {
	t.Helper()
	e := newEngine(t, filepath.Join(t.TempDir(), "flow.db"))
	return benchOver(t, e, opts)
}

func benchOver(t testing.TB, e *engine.Engine, opts ui.Options) *bench {
	srv := httptest.NewServer(ui.Handler(e, opts))
	t.Cleanup(srv.Close)
	return &bench{e: e, srv: srv, csrf: "c0ffee", token: opts.Token}
}

// do sends a request; a POST carries the CSRF cookie and header (and the token when set).
func (b *bench) do(t testing.TB, method, path string, body any, edit ...func(*http.Request)) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = strings.NewReader(string(j))
	}
	req, err := http.NewRequest(method, b.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		_, name := ui.CookieNames(req.Host, false)
		req.AddCookie(&http.Cookie{Name: name, Value: b.csrf})
		req.Header.Set(ui.CSRFHeader, b.csrf)
		req.Header.Set("Content-Type", "application/json")
	}
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	for _, f := range edit {
		f(req)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, out, res.Header
}

// getJSON GETs path, wants 200 and decodes the answer into v.
func (b *bench) getJSON(t testing.TB, path string, v any) {
	t.Helper()
	code, body, _ := b.do(t, http.MethodGet, path, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

// post POSTs body to path and wants the status want; it returns the answer.
func (b *bench) post(t testing.TB, path string, body any, want int) map[string]any {
	t.Helper()
	code, out, _ := b.do(t, http.MethodPost, path, body)
	if code != want {
		t.Fatalf("POST %s: %d %s, want %d", path, code, out, want)
	}
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	return m
}

func errorCode(body []byte) string {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	return e.Error.Code
}

func (b *bench) submit(t testing.TB, workflow string, inputs map[string]any) string {
	t.Helper()
	id, err := b.e.Submit(context.Background(), engine.StartRequest{Workflow: workflow, Inputs: inputs})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitStatus waits until the run has status want.
func (b *bench) waitStatus(t testing.TB, id string, want run.Status) *engine.RunInfo {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := b.e.Status(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if info.Status == want {
			return info
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s, want %s", id, info.Status, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// events returns the run's events of type typ.
func events(t testing.TB, e *engine.Engine, runID, typ string) []run.Event {
	t.Helper()
	evs, err := e.PollEvents(context.Background(), engine.EventQuery{RunID: runID, Max: 10000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []run.Event
	for _, ev := range evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}
