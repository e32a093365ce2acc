package ui_test

// Red-team regressions of the dashboard's credential (issue 33, defect 3): the session is random
// per sign-in and ends; its cookies carry the port in their name; weak tokens are refused off
// loopback; wrong tokens are throttled per client address; a token in a URL signs nobody in.
// These tests use only the HTTP surface (and the cookie prefix), so they also run against the
// dashboard before the fix, where they fail.

import (
	"context"
	"github.com/dcc-flow/dcc-flow/engine/internal/httpauth"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

const rtToken = "Zq3-vL9_pX2mW7rT4kYc8bN1"

const rtHost = "flow.lan:8780"

// rtDo sends one request to h from the client address remote (Host rtHost) and returns the
// recorded answer.
func rtDo(h http.Handler, method, path, remote string, body string, edit ...func(*http.Request)) *httptest.ResponseRecorder {
	var r *http.Request
	if body != "" {
		r = httptest.NewRequest(method, "http://"+rtHost+path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, "http://"+rtHost+path, nil)
	}
	r.Host = rtHost
	r.RemoteAddr = remote
	for _, f := range edit {
		f(r)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// rtSignIn posts the sign-in form and returns the cookies set.
func rtSignIn(t *testing.T, h http.Handler, token, remote string) (int, map[string]*http.Cookie) {
	t.Helper()
	w := rtDo(h, "POST", "/login", remote, url.Values{"token": {token}}.Encode())
	return w.Code, cookiesOf(w)
}

func cookiesOf(w *httptest.ResponseRecorder) map[string]*http.Cookie {
	out := map[string]*http.Cookie{}
	for _, c := range w.Result().Cookies() {
		out[c.Name] = c
	}
	return out
}

// sessionOf returns the session cookie among cs (its name starts with dccflow_session).
func sessionOf(cs map[string]*http.Cookie) *http.Cookie {
	for name, c := range cs {
		if strings.HasPrefix(name, "dccflow_session") && c.Value != "" {
			return c
		}
	}
	return nil
}

func withCookies(cs ...*http.Cookie) func(*http.Request) {
	return func(r *http.Request) {
		for _, c := range cs {
			if c != nil {
				r.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
			}
		}
	}
}

func bearer(tok string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

// Each sign-in gets a session of its own, random, that is not derived from the token: two
// browsers (or two users) never hold the same value, and both work.
func TestRedteamSessionIsRandomPerSignIn(t *testing.T) {
	h := ui.Handler(newEngine(t, ""), ui.Options{Token: rtToken})
	seen := map[string]bool{}
	for i := range 3 {
		code, cs := rtSignIn(t, h, rtToken, "10.0.0.7:1234")
		s := sessionOf(cs)
		if code != http.StatusSeeOther || s == nil {
			t.Fatalf("sign-in %d by POST: %d, cookies %v", i, code, cs)
		}
		if seen[s.Value] || strings.Contains(s.Value, rtToken) || len(s.Value) < 40 {
			t.Fatalf("sign-in %d: session %q repeats an earlier one, holds the token or is short", i, s.Value)
		}
		seen[s.Value] = true
		if w := rtDo(h, "GET", "/api/runs", "10.0.0.8:1", "", withCookies(s)); w.Code != 200 {
			t.Fatalf("the session of sign-in %d: %d %s", i, w.Code, w.Body)
		}
	}
	// A made-up value of the same shape is nobody's session.
	if w := rtDo(h, "GET", "/api/runs", "10.0.0.8:1", "", withCookies(&http.Cookie{Name: "dccflow_session_8780", Value: strings.Repeat("A", 43)})); w.Code != 401 {
		t.Fatalf("a forged session: %d", w.Code)
	}
}

// The session and CSRF cookies carry the port in their names (browsers send a host's cookies to
// all its ports: two dashboards of one host do not share them) and the right attributes; the
// CSRF value a POST needs is the session's own, not any pair of cookie and header a sibling
// application could plant.
func TestRedteamCookieNamesAndAttributes(t *testing.T) {
	e := newEngine(t, "")
	h := ui.Handler(e, ui.Options{Token: rtToken})
	code, cs := rtSignIn(t, h, rtToken, "10.0.0.7:1234")
	s, c := cs["dccflow_session_8780"], cs["dccflow_csrf_8780"]
	if code != http.StatusSeeOther || s == nil || c == nil {
		t.Fatalf("sign-in: %d, cookies %v; want dccflow_session_8780 and dccflow_csrf_8780", code, cs)
	}
	if !s.HttpOnly || s.SameSite != http.SameSiteStrictMode || s.Path != "/" || s.Secure || s.MaxAge <= 0 {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/, not Secure over http, a Max-Age", s)
	}
	if c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
		t.Errorf("CSRF cookie %+v: want readable by the page, SameSite=Strict, Path=/", c)
	}
	// Over TLS (at a proxy that says so), both are Secure.
	w := rtDo(h, "POST", "/login", "10.0.0.7:1234", "token="+url.QueryEscape(rtToken), func(r *http.Request) { r.Header.Set("X-Forwarded-Proto", "https") })
	for _, ck := range cookiesOf(w) {
		if !ck.Secure {
			t.Errorf("over https, cookie %s is not Secure", ck.Name)
		}
	}
	id := mustSubmit(t, e, "slow")
	cancel := "/api/runs/" + id + "/cancel"
	post := func(csrfCookie, header string) int {
		w := rtDo(h, "POST", cancel, "10.0.0.7:1234", "", withCookies(s, &http.Cookie{Name: "dccflow_csrf_8780", Value: csrfCookie}),
			func(r *http.Request) {
				r.Header.Set(ui.CSRFHeader, header)
				r.Header.Set("Content-Type", "application/json")
				r.Body = http.NoBody
			})
		return w.Code
	}
	if got := post("planted", "planted"); got != http.StatusForbidden {
		t.Fatalf("a planted CSRF cookie and header with a session: %d, want 403", got)
	}
	if got := post(c.Value, c.Value); got == http.StatusForbidden || got == http.StatusUnauthorized {
		t.Fatalf("the session's own CSRF value: %d", got)
	}
}

// Off loopback, a token anyone could guess is refused when the dashboard starts, naming the
// flag and how to make a good one; loopback takes any token.
func TestRedteamWeakTokensAreRefusedOffLoopback(t *testing.T) {
	e := newEngine(t, "")
	for _, tok := range []string{" ", "\n", "a", "short-token", "aaaaaaaaaaaaaaaaaaaaaaaa", "                a               ", "abcd\nefghijklmnopqrstu"} {
		s, err := ui.Serve(e, "0.0.0.0:0", ui.Options{Token: tok})
		if err == nil {
			_ = s.Close(context.Background())
			t.Errorf("token %q off loopback: served", tok)
			continue
		}
		if run.CodeOf(err) != run.CodeInvalidInput || !strings.Contains(err.Error(), "--token-file") || !strings.Contains(err.Error(), "secrets.token_urlsafe") {
			t.Errorf("token %q: %v; want invalid_input naming --token-file and how to generate one", tok, err)
		}
	}
	s, err := ui.Serve(e, "0.0.0.0:0", ui.Options{Token: rtToken})
	if err != nil {
		t.Fatalf("a strong token off loopback: %v", err)
	}
	_ = s.Close(context.Background())
	s, err = ui.Serve(e, "127.0.0.1:0", ui.Options{Token: "a"})
	if err != nil {
		t.Fatalf("a short token on loopback: %v", err)
	}
	_ = s.Close(context.Background())
}

// Wrong tokens (bearer or sign-in form) from one address are throttled after a few: 429 with
// Retry-After, the token not even checked, the right one included; another address is not
// affected.
func TestRedteamWrongTokensAreThrottled(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)} // frozen: the waits never end under load
	h := ui.Handler(newEngine(t, ""), ui.Options{Token: rtToken, Now: clk.Now})
	const guesser = "203.0.113.9:4000"
	throttled := -1
	for i := range 12 {
		w := rtDo(h, "GET", "/api/runs", guesser, "", bearer("guess"+strings.Repeat("x", i)))
		if w.Code == http.StatusTooManyRequests {
			if w.Header().Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After: %v", w.Header())
			}
			throttled = i
			break
		}
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d", i, w.Code)
		}
	}
	if throttled < 0 || throttled > 10 {
		t.Fatalf("12 wrong tokens from one address: never throttled (429)")
	}
	// The right token from the throttled address waits too (else the answer would tell a guess).
	if w := rtDo(h, "GET", "/api/runs", guesser, "", bearer(rtToken)); w.Code != http.StatusTooManyRequests {
		t.Errorf("the right token from the throttled address: %d, want 429", w.Code)
	}
	if code, _ := rtSignIn(t, h, rtToken, guesser); code != http.StatusTooManyRequests {
		t.Errorf("a sign-in from the throttled address: %d, want 429", code)
	}
	// Another client is not affected, by bearer or by the form.
	if w := rtDo(h, "GET", "/api/runs", "198.51.100.4:5000", "", bearer(rtToken)); w.Code != 200 {
		t.Errorf("the right token from another address: %d %s", w.Code, w.Body)
	}
	if code, cs := rtSignIn(t, h, rtToken, "198.51.100.5:5000"); code != http.StatusSeeOther || sessionOf(cs) == nil {
		t.Errorf("a sign-in from another address: %d", code)
	}
	// Another site's page cannot spend a visitor's address's allowance: its form posts (Origin
	// its own, or null) are refused before the token is looked at, and count for nothing.
	const visitor = "198.51.100.77:5000"
	for i := range 3 * httpauth.ThrottleFree {
		origin := []string{"http://evil.example", "null"}[i%2]
		w := rtDo(h, "POST", "/login", visitor, "token=nope", func(r *http.Request) { r.Header.Set("Origin", origin) })
		if w.Code != http.StatusForbidden {
			t.Fatalf("a sign-in posted from Origin %s: %d, want 403", origin, w.Code)
		}
	}
	if code, _ := rtSignIn(t, h, rtToken, visitor); code != http.StatusSeeOther {
		t.Errorf("a sign-in after other sites' refused posts: %d, want 303", code)
	}
	// Wrong sign-in forms count as well.
	const formGuesser = "203.0.113.10:4000"
	var last int
	for range 12 {
		if last, _ = rtSignIn(t, h, "nope", formGuesser); last == http.StatusTooManyRequests {
			break
		}
	}
	if last != http.StatusTooManyRequests {
		t.Errorf("12 wrong sign-ins: last %d, want 429", last)
	}
}

// GET /login?token=… signs nobody in (the token would sit in the history, the address bar and
// proxies' logs): it shows the sign-in form.
func TestRedteamLoginByURLDoesNotSignIn(t *testing.T) {
	h := ui.Handler(newEngine(t, ""), ui.Options{Token: rtToken})
	w := rtDo(h, "GET", "/login?token="+url.QueryEscape(rtToken), "10.0.0.7:1234", "")
	if s := sessionOf(cookiesOf(w)); s != nil || w.Code == http.StatusSeeOther {
		t.Fatalf("GET /login?token=: %d, session %v", w.Code, s)
	}
	if !strings.Contains(w.Body.String(), `method="post"`) {
		t.Errorf("GET /login shows no sign-in form: %s", w.Body)
	}
}

func mustSubmit(t *testing.T, e *engine.Engine, workflow string) string {
	t.Helper()
	id, err := e.Submit(context.Background(), engine.StartRequest{Workflow: workflow})
	if err != nil {
		t.Fatal(err)
	}
	return id
}
