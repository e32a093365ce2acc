package ui

import (
	"fmt"
	"github.com/dcc-flow/dcc-flow/engine/internal/httpauth"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Cookie and header names of the security rules (docs/guide/ui.md, "Security"). Browsers send a
// host's cookies to every port of it, so each cookie's name ends with the port the dashboard is
// reached on (CookieNames): two dashboards of one host do not share or overwrite their cookies.
// Another web application on the host still receives them: the session is why that is at worst
// one session, revocable and expiring (a random value per sign-in, kept by this server only).
const (
	SessionCookiePrefix = "dccflow_session_" // + port; HttpOnly, SameSite=Strict; set by POST /login
	CSRFCookiePrefix    = "dccflow_csrf_"    // + port; readable by the page, which echoes it in CSRFHeader
	CSRFHeader          = "X-DCC-Flow-CSRF"
)

// CookieNames returns the session and CSRF cookie names of a dashboard reached at host (a Host
// header, "flow.lan:8780"; without a port, 443 when secure, else 80): "dccflow_session_8780",
// "dccflow_csrf_8780".
func CookieNames(host string, secure bool) (session, csrf string) {
	port := "80"
	if secure {
		port = "443"
	}
	if _, p, err := net.SplitHostPort(host); err == nil && p != "" {
		port = p
		if _, err := strconv.ParseUint(p, 10, 16); err != nil {
			port = "0" // not a port: a name still made of safe characters
		}
	}
	return SessionCookiePrefix + port, CSRFCookiePrefix + port
}

// secure reports whether r came over TLS (here, or at a proxy that says so).
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func cookieNames(r *http.Request) (session, csrf string) { return CookieNames(r.Host, secure(r)) }

// ServeHTTP applies the rules every response shares (security headers, the Host rule without a
// token, the Origin rule) and routes the request.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	// No Referer leaves for other sites; same-origin requests keep theirs, so that a form POST
	// (the sign-in) carries the page's Origin: under no-referrer, Chromium sends Origin: null,
	// which the Origin rule refuses.
	hd.Set("Referrer-Policy", "same-origin")
	if h.opts.Token == "" && !isLoopbackHost(hostOf(r.Host)) {
		writeError(w, http.StatusForbidden, "forbidden", fmt.Sprintf(
			"Host %q is not a loopback name: this dashboard has no token, so it answers only http://127.0.0.1, http://[::1] or http://localhost; serve it with --token to reach it by another name", r.Host))
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r.Host) {
		writeError(w, http.StatusForbidden, "forbidden", fmt.Sprintf(
			"Origin %q is not this dashboard's own (%s): requests from other sites' pages are refused", origin, r.Host))
		return
	}
	h.mux.ServeHTTP(w, r)
}

// auth is how a request was let in: "none" (no token configured), "session" (its session
// cookie) or "bearer" (the token in Authorization).
type auth struct {
	how       string
	sessionID string
	csrf      string // the session's CSRF value ("" unless how is "session")
}

// guard wraps an /api/ or /metrics handler: the token rule, then for a POST the CSRF rule.
func (h *handler) guard(next func(http.ResponseWriter, *http.Request, auth)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		a, ok := h.authenticate(w, r)
		if !ok {
			return
		}
		if r.Method == http.MethodPost && !h.csrfOK(r, a) {
			_, name := cookieNames(r)
			writeError(w, http.StatusForbidden, "forbidden", fmt.Sprintf(
				"the %s header must equal the %s cookie (the page sets both; reload it)", CSRFHeader, name))
			return
		}
		next(w, r, a)
	}
}

// csrfOK applies the CSRF rule to a POST: with a session, the header must carry that session's
// CSRF value; otherwise it must equal the CSRF cookie (double submit).
func (h *handler) csrfOK(r *http.Request, a auth) bool {
	got := r.Header.Get(CSRFHeader)
	if got == "" {
		return false
	}
	if a.how == "session" {
		return httpauth.Equal(got, a.csrf)
	}
	_, name := cookieNames(r)
	c, err := r.Cookie(name)
	return err == nil && c.Value != "" && httpauth.Equal(c.Value, got)
}

// authenticate reports whether r may use the API: no token is configured, or r carries a live
// session cookie, or the token as a bearer header. When not, it has answered: 401, or 429 with
// Retry-After while r's address is throttled for wrong tokens (the token is then not checked).
func (h *handler) authenticate(w http.ResponseWriter, r *http.Request) (auth, bool) {
	if h.opts.Token == "" {
		return auth{how: "none"}, true
	}
	name, _ := cookieNames(r)
	if c, err := r.Cookie(name); err == nil {
		if csrf, ok := h.sessions.use(c.Value); ok {
			return auth{how: "session", sessionID: c.Value, csrf: csrf}, true
		}
	}
	if ok, wait := h.throttle.Bearer(r, h.opts.Token); ok {
		return auth{how: "bearer"}, true
	} else if wait > 0 {
		writeThrottled(w, wait)
		return auth{}, false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="dcc-flow"`)
	writeError(w, http.StatusUnauthorized, "unauthorized",
		"this dashboard needs its token: sign in at /login (a form that posts it), or send Authorization: Bearer TOKEN")
	return auth{}, false
}

// writeThrottled answers 429 too_many_attempts with Retry-After (whole seconds, rounded up).
func writeThrottled(w http.ResponseWriter, d time.Duration) {
	secs := httpauth.RetryAfter(d)
	w.Header().Set("Retry-After", secs)
	writeError(w, http.StatusTooManyRequests, "too_many_attempts", fmt.Sprintf(
		"too many wrong tokens from this address: try again in %s s (docs/reference/limits.md, \"Dashboard\")", secs))
}

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in · dcc-flow</title><link rel="icon" href="/favicon.svg"><link rel="stylesheet" href="/app.css"></head>
<body><main id="main"><form class="card login" method="post" action="/login" data-testid="login-form">
<div class="card-head"><h2>This dashboard needs its token</h2></div>
<div class="card-body">
{{if .Message}}<p class="login-error" role="alert" data-testid="login-error">{{.Message}}</p>{{end}}
<p class="muted">Type the token the server was started with (dcc-flow serve --token-file, DCCFLOW_TOKEN or --token). It is posted once; this browser then holds a session that ends after {{.Idle}} unused, after {{.Max}} in any case, or when you sign out.</p>
<input type="password" name="token" placeholder="token" data-testid="login-token" autocomplete="current-password" autofocus required>
<button class="btn primary" type="submit" data-testid="login-submit">Sign in</button>
</div></form></main></body></html>
`))

// showLogin answers the sign-in form with status and an optional message.
func (h *handler) showLogin(w http.ResponseWriter, status int, message string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = loginPage.Execute(w, map[string]string{"Message": message, "Idle": human(h.opts.SessionIdle), "Max": human(h.opts.SessionMax)})
}

// human writes d as "12 h", "7 days", "90 s".
func human(d time.Duration) string {
	switch {
	case d >= 48*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return fmt.Sprintf("%g s", d.Seconds())
}

// loginForm answers GET /login: the sign-in form. A token in the query is not used (it would
// stay in the browser's history, a proxy's log and the address bar).
func (h *handler) loginForm(w http.ResponseWriter, r *http.Request) {
	if h.opts.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	msg := ""
	if r.URL.Query().Has("token") {
		msg = "Signing in with the token in the address (/login?token=) is not accepted: type it here, it is posted instead."
	}
	h.showLogin(w, http.StatusOK, msg)
}

// login answers POST /login (form field token): a right token starts a session (its cookie and
// its CSRF cookie) and redirects to the dashboard; a wrong one is 401 and counts against the
// client's address (429 with Retry-After once it is throttled).
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	if h.opts.Token == "" {
		h.ensureCSRF(w, r)
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	key := httpauth.ClientKey(r.RemoteAddr)
	throttled := func(d time.Duration) {
		w.Header().Set("Retry-After", httpauth.RetryAfter(d))
		h.showLogin(w, http.StatusTooManyRequests, fmt.Sprintf("Too many wrong tokens from this address: try again in %s s.", httpauth.RetryAfter(d)))
	}
	if d := h.throttle.Wait(key); d > 0 { // before reading the body: a throttled client's is not read
		throttled(d)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		h.showLogin(w, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return
	}
	// Checked again with the comparison, in one step (httpauth.Throttle.Check): sign-ins posted
	// at once are throttled as if posted one after the other.
	given := r.PostForm.Get("token")
	if ok, d := h.throttle.Check(key, func() bool { return httpauth.Equal(given, h.opts.Token) }); d > 0 {
		throttled(d)
		return
	} else if !ok {
		h.showLogin(w, http.StatusUnauthorized, "Wrong token: type the token the server was started with.")
		return
	}
	sname, cname := cookieNames(r)
	if c, err := r.Cookie(sname); err == nil {
		h.sessions.revoke(c.Value) // a browser signing in again leaves no second session behind
	}
	id, csrf := h.sessions.create()
	maxAge := int(h.opts.SessionMax / time.Second)
	http.SetCookie(w, &http.Cookie{Name: sname, Value: id, Path: "/", MaxAge: maxAge, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	http.SetCookie(w, &http.Cookie{Name: cname, Value: csrf, Path: "/", MaxAge: maxAge, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout answers POST /api/logout: the request's session ends here (its cookies are cleared);
// without a session (no token, a bearer header) there is nothing to end.
func (h *handler) logout(w http.ResponseWriter, r *http.Request, a auth) {
	if a.how == "session" {
		h.sessions.revoke(a.sessionID)
		sname, cname := cookieNames(r)
		for _, n := range []string{sname, cname} {
			http.SetCookie(w, &http.Cookie{Name: n, Value: "", Path: "/", MaxAge: -1, HttpOnly: n == sname, SameSite: http.SameSiteStrictMode, Secure: secure(r)})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"signed_out": a.how == "session"})
}

// sessionInfo answers GET /api/session: how this request was let in ("none", "session",
// "bearer"), for the page's sign-out button.
func (h *handler) sessionInfo(w http.ResponseWriter, r *http.Request, a auth) {
	writeJSON(w, http.StatusOK, map[string]any{"auth": a.how})
}

// ensureCSRF gives the browser its CSRF cookie: with a live session, that session's value;
// otherwise a random one when it has none.
func (h *handler) ensureCSRF(w http.ResponseWriter, r *http.Request) {
	sname, cname := cookieNames(r)
	c, err := r.Cookie(cname)
	if h.opts.Token != "" {
		if s, err2 := r.Cookie(sname); err2 == nil {
			if csrf, ok := h.sessions.use(s.Value); ok {
				if err != nil || c.Value != csrf {
					http.SetCookie(w, &http.Cookie{Name: cname, Value: csrf, Path: "/", MaxAge: int(h.opts.SessionMax / time.Second),
						SameSite: http.SameSiteStrictMode, Secure: secure(r)})
				}
				return
			}
		}
	}
	if err == nil && c.Value != "" {
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cname, Value: randomText(24), Path: "/", SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}

// sameOrigin reports whether origin (an Origin header) names host (the request's Host), in
// scheme http or https.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") {
		return false
	}
	return normHostPort(u.Scheme, u.Host) == normHostPort(u.Scheme, host)
}

func normHostPort(scheme, hostport string) string {
	hostport = strings.ToLower(hostport)
	if scheme == "http" {
		return strings.TrimSuffix(hostport, ":80")
	}
	return strings.TrimSuffix(hostport, ":443")
}

// hostOf returns the host of a Host header ("127.0.0.1:8780" → "127.0.0.1", "[::1]:80" → "::1").
func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}
