package schedule

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
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
