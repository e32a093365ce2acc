package httpauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MinTokenLength is the shortest token a door accepts on an address that is not loopback.
const MinTokenLength = 16

// CheckToken refuses a token too weak for door (the dashboard, MCP, metrics) on addr, an
// address that is not loopback: shorter than MinTokenLength (spaces around it not counted), with
// fewer than 5 different characters, or with control characters (which no header carries). The
// error names the door, the address, the problem and how to make a strong token.
func CheckToken(door, addr, token string) error {
	t := strings.TrimSpace(token)
	problem := ""
	distinct := map[rune]bool{}
	for _, c := range t {
		distinct[c] = true
		if c < 0x20 || c == 0x7f {
			problem = "it holds control characters"
		}
	}
	switch {
	case problem != "":
	case utf8.RuneCountInString(t) < MinTokenLength:
		problem = fmt.Sprintf("it has %d character(s) (spaces around it not counted), fewer than %d", utf8.RuneCountInString(t), MinTokenLength)
	case len(distinct) < 5:
		problem = fmt.Sprintf("it has only %d different characters", len(distinct))
	default:
		return nil
	}
	return fmt.Errorf("refusing to serve %s on %s, which is not a loopback address, with a weak token: %s, "+
		"and anyone who can reach the port could guess it; generate one with "+
		`python -c "import secrets;print(secrets.token_urlsafe(32))" and give it with --token-file or DCCFLOW_TOKEN `+
		"(token in the Python and C APIs), or serve on 127.0.0.1", door, addr, problem)
}

// Equal compares two secrets in constant time (of their hashes: the length is not told either).
func Equal(a, b string) bool {
	x, y := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(x[:], y[:]) == 1
}

// Bearer checks r's "Authorization: Bearer TOKEN" header against token under t. ok when it
// matches. wait > 0 when r's address is throttled: the header was not checked, answer 429 with
// RetryAfter(wait). A wrong header counts against the address; a request without one does not
// (a client may ask first without it), and is not ok.
func (t *Throttle) Bearer(r *http.Request, token string) (ok bool, wait time.Duration) {
	got := r.Header.Get("Authorization")
	if got == "" {
		return false, 0
	}
	return t.Check(ClientKey(r.RemoteAddr), func() bool { return Equal(got, "Bearer "+token) })
}

// RetryAfter is d as a Retry-After value: whole seconds, rounded up, at least 1.
func RetryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// IsLoopbackHost reports whether host (an address's host part) is "localhost" (any case) or a
// loopback IP address; "" and names other than localhost are not.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
