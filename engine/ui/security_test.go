package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

func TestServeRefusesOffLoopbackWithoutToken(t *testing.T) {
	e := newEngine(t, "")
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:0", "[::]:0"} {
		s, err := ui.Serve(e, addr, ui.Options{})
		if err == nil {
			_ = s.Close(context.Background())
			t.Fatalf("Serve(%s) without a token started", addr)
		}
		if run.CodeOf(err) != run.CodeInvalidInput || !strings.Contains(err.Error(), "--token") {
			t.Errorf("Serve(%s): %v (code %s), want invalid_input naming --token", addr, err, run.CodeOf(err))
		}
	}
	if _, err := ui.Serve(e, "nonsense", ui.Options{}); run.CodeOf(err) != run.CodeInvalidInput {
		t.Errorf("a bad address: %v, want invalid_input", err)
	}
	// With a token, any address serves; on loopback, none is needed.
	s, err := ui.Serve(e, "0.0.0.0:0", ui.Options{Token: rtToken})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close(context.Background())
	s, err = ui.Serve(e, "127.0.0.1:0", ui.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") || !strings.HasSuffix(s.URL(), "/") {
		t.Errorf("URL %q", s.URL())
	}
	res, err := http.Get(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Security-Policy") != "default-src 'self'" || res.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("GET /: %d, headers %v", res.StatusCode, res.Header)
	}
	var csrf bool
	for _, c := range res.Cookies() {
		csrf = csrf || (strings.HasPrefix(c.Name, ui.CSRFCookiePrefix) && len(c.Value) >= 32 && c.SameSite == http.SameSiteStrictMode)
	}
	if !csrf {
		t.Errorf("GET / set no CSRF cookie: %v", res.Header["Set-Cookie"])
	}
}

func TestTokenIsRequiredAsBearerOrSessionCookie(t *testing.T) {
	b := newBench(t, ui.Options{Token: "s3cret"})
	b.token = "" // send it by hand below
	if code, body, h := b.do(t, "GET", "/api/runs", nil); code != 401 || errorCode(body) != "unauthorized" || h.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d %s", code, body)
	}
	bearer := func(v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set("Authorization", v) } }
	if code, _, _ := b.do(t, "GET", "/api/runs", nil, bearer("Bearer wrong")); code != 401 {
		t.Errorf("wrong token: %d", code)
	}
	if code, _, _ := b.do(t, "GET", "/api/runs", nil, bearer("Bearer s3cret")); code != 200 {
		t.Errorf("bearer token: %d", code)
	}
	// The page itself holds no data: it loads, and shows a token prompt when /api/ says 401.
	if code, _, _ := b.do(t, "GET", "/", nil); code != 200 {
		t.Errorf("GET / with a token configured: %d", code)
	}
	form := func(tok string) func(*http.Request) {
		return func(r *http.Request) {
			r.Body = io.NopCloser(strings.NewReader(url.Values{"token": {tok}}.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	}
	if code, _, _ := b.do(t, "POST", "/login", nil, form("nope")); code != 401 {
		t.Errorf("login with a wrong token: %d", code)
	}
	code, _, h := b.do(t, "POST", "/login", nil, form("s3cret"))
	if code != http.StatusSeeOther || h.Get("Location") != "/" {
		t.Fatalf("login: %d %v", code, h)
	}
	var session *http.Cookie
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if strings.HasPrefix(c.Name, ui.SessionCookiePrefix) {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || strings.Contains(session.Value, "s3cret") {
		t.Fatalf("session cookie %+v", session)
	}
	withCookie := func(c *http.Cookie) func(*http.Request) { return func(r *http.Request) { r.AddCookie(c) } }
	if code, _, _ := b.do(t, "GET", "/api/runs", nil, withCookie(session)); code != 200 {
		t.Errorf("session cookie: %d", code)
	}
	forged := *session
	forged.Value = strings.Repeat("0", len(session.Value))
	if code, _, _ := b.do(t, "GET", "/api/runs", nil, withCookie(&forged)); code != 401 {
		t.Errorf("forged session cookie: %d", code)
	}
	// An action needs the token too, CSRF header or not.
	id := b.submit(t, "slow", nil)
	if code, body, _ := b.do(t, "POST", "/api/runs/"+id+"/cancel", map[string]any{"by": "mallory"}); code != 401 {
		t.Errorf("cancel without the token: %d %s", code, body)
	}
	b.token = "s3cret"
	b.post(t, "/api/runs/"+id+"/cancel", map[string]any{"by": "ann"}, 200)
}

func TestPostsNeedTheCSRFHeaderAndTheirOwnOrigin(t *testing.T) {
	b := newBench(t, ui.Options{})
	id := b.submit(t, "slow", nil)
	path := "/api/runs/" + id + "/pause"
	cases := []struct {
		name string
		edit func(*http.Request)
		want int
	}{
		{"no header", func(r *http.Request) { r.Header.Del(ui.CSRFHeader) }, 403},
		{"no cookie", func(r *http.Request) { r.Header.Del("Cookie") }, 403},
		{"header differs from cookie", func(r *http.Request) { r.Header.Set(ui.CSRFHeader, "other") }, 403},
		{"foreign Origin", func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }, 403},
		{"Origin on another port", func(r *http.Request) { r.Header.Set("Origin", "http://127.0.0.1:1") }, 403},
		{"null Origin", func(r *http.Request) { r.Header.Set("Origin", "null") }, 403},
	}
	for _, c := range cases {
		code, body, _ := b.do(t, "POST", path, map[string]any{"by": "ann"}, c.edit)
		if code != c.want || errorCode(body) != "forbidden" {
			t.Errorf("%s: %d %s, want %d forbidden", c.name, code, body, c.want)
		}
	}
	if info, _ := b.e.Status(context.Background(), id); info.Status == run.StatusPaused {
		t.Fatal("a refused pause paused the run")
	}
	// A foreign Origin is refused on reads too; the page's own origin goes through.
	if code, _, _ := b.do(t, "GET", "/api/runs", nil, func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }); code != 403 {
		t.Errorf("GET with a foreign Origin: %d", code)
	}
	own := func(r *http.Request) { r.Header.Set("Origin", b.srv.URL) }
	if code, body, _ := b.do(t, "POST", path, map[string]any{"by": "ann"}, own); code != 200 {
		t.Errorf("POST from its own origin: %d %s", code, body)
	}
	b.waitStatus(t, id, run.StatusPaused)
}

// Without a token the dashboard answers only loopback Host names: a DNS-rebinding page (whose
// name resolves to 127.0.0.1) is refused.
func TestWithoutATokenOnlyLoopbackHostsAreAnswered(t *testing.T) {
	b := newBench(t, ui.Options{})
	for host, want := range map[string]int{"evil.example:8780": 403, "localhost:8780": 200, "127.0.0.1:9": 200, "[::1]:8780": 200} {
		code, body, _ := b.do(t, "GET", "/api/runs", nil, func(r *http.Request) { r.Host = host })
		if code != want {
			t.Errorf("Host %s: %d %s, want %d", host, code, body, want)
		}
	}
	tb := newBench(t, ui.Options{Token: "x"})
	if code, _, _ := tb.do(t, "GET", "/api/runs", nil, func(r *http.Request) { r.Host = "flow.studio.lan:8780" }); code != 200 {
		t.Errorf("with a token, any Host: %d", code)
	}
}

// A step output holding markup comes back JSON-escaped, and the front-end never parses run data
// as HTML: no innerHTML (or its relatives) in its scripts, no inline script or style.
func TestRunDataIsNeverHTML(t *testing.T) {
	b := newBench(t, ui.Options{})
	payload := `<script>alert("x")</script><img src=x onerror=alert(1)>`
	id := b.submit(t, "echo", map[string]any{"value": payload})
	b.waitStatus(t, id, run.StatusCompleted)
	code, body, h := b.do(t, "GET", "/api/runs/"+id+"/steps/say", nil)
	if code != 200 || h.Get("Content-Type") != "application/json" || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("%d %v %s", code, h, body)
	}
	if strings.Contains(string(body), "<script") || strings.Contains(string(body), "<img") || !strings.Contains(string(body), `\u003cscript\u003e`) {
		t.Errorf("the output is not escaped: %s", body)
	}
	_, body, _ = b.do(t, "GET", "/api/runs/"+id, nil)
	if strings.Contains(string(body), "<script") {
		t.Errorf("the run detail is not escaped: %s", body)
	}

	entries, err := os.ReadDir("assets")
	if err != nil {
		t.Fatal(err)
	}
	banned := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|createContextualFragment|DOMParser`)
	scripts := 0
	for _, en := range entries {
		text, err := os.ReadFile("assets/" + en.Name())
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(en.Name(), ".js"):
			scripts++
			if m := banned.FindString(string(text)); m != "" {
				t.Errorf("%s uses %s: run data must go through textContent", en.Name(), m)
			}
		case strings.HasSuffix(en.Name(), ".html"):
			if regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`).Match(text) || !strings.Contains(string(text), `<script type="module" src="app.js">`) {
				t.Errorf("%s has an inline script (CSP default-src 'self' refuses it)", en.Name())
			}
			if regexp.MustCompile(`\sstyle=|\son[a-z]+=`).Match(text) {
				t.Errorf("%s has an inline style or handler attribute", en.Name())
			}
		}
	}
	if scripts < 3 {
		t.Errorf("found %d scripts in assets/", scripts)
	}
	// The assets are served with their types (nosniff makes the browser trust only those).
	for path, typ := range map[string]string{"/app.js": "text/javascript", "/dom.js": "text/javascript", "/app.css": "text/css", "/favicon.svg": "image/svg+xml"} {
		code, _, h := b.do(t, "GET", path, nil)
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), typ) {
			t.Errorf("GET %s: %d %s", path, code, h.Get("Content-Type"))
		}
	}
}
