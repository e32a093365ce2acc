package schedule

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"strings"
)

// SignatureHeader is the header carrying a webhook body's HMAC-SHA256 signature (GitHub's).
const SignatureHeader = "X-Hub-Signature-256"

const signaturePrefix = "sha256="

// HMACSHA256Hex returns the lowercase hex HMAC-SHA256 of body with secret, without the
// "sha256=" prefix: the X-Hub-Signature-256 header of a signed request is
// "sha256=" + HMACSHA256Hex(secret, body).
func HMACSHA256Hex(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// VerifyHubSignature256 reports whether header is "sha256=<hex>" with the HMAC-SHA256 of body
// under secret. The digest is compared in constant time; the hex may be in either case. A
// missing prefix (bare hex), another algorithm, or a digest of the wrong length is false.
func VerifyHubSignature256(secret, body []byte, header string) bool {
	return verifySignature(hmac.New(sha256.New, secret), body, header) == ""
}

// verifySignature checks header against body with mac (reset first) and returns "" when it
// matches, else why it does not, for the 401 message.
func verifySignature(mac hash.Hash, body []byte, header string) string {
	if header == "" {
		return "the request has no " + SignatureHeader + " header; sign the body with HMAC-SHA256 and send \"sha256=<hex digest>\""
	}
	hexDigest, ok := strings.CutPrefix(header, signaturePrefix)
	if !ok {
		return SignatureHeader + " must be \"sha256=\" followed by the 64 hex digits of the HMAC-SHA256 of the body"
	}
	var want [sha256.Size]byte
	if len(hexDigest) != 2*sha256.Size {
		return SignatureHeader + " must have 64 hex digits after \"sha256=\""
	}
	if _, err := hex.Decode(want[:], []byte(hexDigest)); err != nil {
		return SignatureHeader + " is not hex after \"sha256=\""
	}
	mac.Reset()
	mac.Write(body)
	var got [sha256.Size]byte
	if !hmac.Equal(mac.Sum(got[:0]), want[:]) {
		return "the " + SignatureHeader + " signature does not match the body; check the shared secret and sign the raw body bytes"
	}
	return ""
}

// TimestampedSignatureHeader carries the signature of a schedule with signature: timestamped:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">" (the scheme of Stripe's and Slack's
// webhooks). Several v1 may be given (a secret being rotated); one that matches is enough.
// Other keys are ignored.
const TimestampedSignatureHeader = "X-Dcc-Flow-Signature"

// TimestampedSignature returns the TimestampedSignatureHeader value for body sent at unix
// second t.
func TimestampedSignature(secret, body []byte, t int64) string {
	ts := strconv.FormatInt(t, 10)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts + "."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// verifyTimestamped checks a TimestampedSignatureHeader value against body with mac (reset
// first). On a match it returns the signed time and the matching v1 digest (the replay key);
// otherwise why not, for the 401 message.
func verifyTimestamped(mac hash.Hash, body []byte, header string) (t int64, digest string, why string) {
	const form = TimestampedSignatureHeader + ` must be "t=<unix seconds>,v1=<64 hex digits of the HMAC-SHA256 of "<t>.<body>">"`
	if header == "" {
		return 0, "", "the request has no " + TimestampedSignatureHeader + " header (this schedule has signature: timestamped); " +
			`send "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">"`
	}
	var ts string
	var v1s [][sha256.Size]byte
	var v1hex []string
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return 0, "", form
		}
		switch k {
		case "t":
			if ts != "" {
				return 0, "", form + "; it has t twice"
			}
			ts = v
		case "v1":
			var d [sha256.Size]byte
			if len(v) != 2*sha256.Size {
				return 0, "", form + "; a v1 is not 64 hex digits"
			}
			if _, err := hex.Decode(d[:], []byte(v)); err != nil {
				return 0, "", form + "; a v1 is not hex"
			}
			v1s, v1hex = append(v1s, d), append(v1hex, strings.ToLower(v))
		}
	}
	n, err := strconv.ParseInt(ts, 10, 64)
	if ts == "" || len(v1s) == 0 || err != nil || n <= 0 {
		return 0, "", form
	}
	mac.Reset()
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	var got [sha256.Size]byte
	sum := mac.Sum(got[:0])
	for i, want := range v1s {
		if hmac.Equal(sum, want[:]) {
			return n, v1hex[i], ""
		}
	}
	return 0, "", "the " + TimestampedSignatureHeader + " signature does not match; check the shared secret and sign \"<t>.\" followed by the raw body bytes"
}
