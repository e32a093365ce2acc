package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Cookie and header names of the security rules (docs/ui.md, "Security").
const (
	SessionCookie = "dccflow_session" // HttpOnly, SameSite=Strict; set by GET /login?token=
	CSRFCookie    = "dccflow_csrf"    // readable by the page, which echoes it in CSRFHeader
	CSRFHeader    = "X-DCC-Flow-CSRF"
)

// ServeHTTP applies the rules every response shares (security headers, the Host rule without a
// token, the Origin rule) and routes the request.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
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

// guard wraps an /api/ or /metrics handler: the token rule, then for a POST the CSRF rule.
func (h *handler) guard(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if !h.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dcc-flow"`)
			writeError(w, http.StatusUnauthorized, "unauthorized",
				"this dashboard needs its token: open /login?token=TOKEN once in this browser, or send Authorization: Bearer TOKEN")
			return
		}
		if r.Method == http.MethodPost {
			c, err := r.Cookie(CSRFCookie)
			got := r.Header.Get(CSRFHeader)
			if err != nil || c.Value == "" || got == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(got)) != 1 {
				writeError(w, http.StatusForbidden, "forbidden", fmt.Sprintf(
					"the %s header must equal the %s cookie (the page sets both; reload it)", CSRFHeader, CSRFCookie))
				return
			}
		}
		next(w, r)
	}
}

// authorized reports whether r may use the API: no token is configured, or r carries it as a
// bearer header or the session cookie.
func (h *handler) authorized(r *http.Request) bool {
	if h.opts.Token == "" {
		return true
	}
	if a := r.Header.Get("Authorization"); a != "" &&
		subtle.ConstantTimeCompare([]byte(a), []byte("Bearer "+h.opts.Token)) == 1 {
		return true
	}
	c, err := r.Cookie(SessionCookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(h.session())) == 1
}

// session is the value of the session cookie: an HMAC of a fixed label under the token, so it
// proves the token without carrying it, and changes when the token changes.
func (h *handler) session() string {
	m := hmac.New(sha256.New, []byte(h.opts.Token))
	m.Write([]byte("dcc-flow ui session v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// login checks ?token=, sets the session cookie and redirects to the dashboard.
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("token")
	if h.opts.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(h.opts.Token)) != 1 {
		writeError(w, http.StatusUnauthorized, "unauthorized", "wrong or missing token: open /login?token=TOKEN with the token the server was started with")
		return
	}
	if h.opts.Token != "" {
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: h.session(), Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
	h.ensureCSRF(w, r)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// ensureCSRF sets the CSRF cookie when the request has none.
func (h *handler) ensureCSRF(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(CSRFCookie); err == nil && c.Value != "" {
		return
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	http.SetCookie(w, &http.Cookie{Name: CSRFCookie, Value: hex.EncodeToString(b[:]), Path: "/", SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
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
