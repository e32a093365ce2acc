package schedule

import (
	"strings"
	"testing"
)

// GitHub's published example: https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
const (
	githubSecret    = "It's a Secret to Everybody"
	githubBody      = "Hello, World!"
	githubSignature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func TestHMACSHA256HexGitHubExample(t *testing.T) {
	t.Parallel()
	if got := "sha256=" + HMACSHA256Hex([]byte(githubSecret), []byte(githubBody)); got != githubSignature {
		t.Errorf("got %s; want %s", got, githubSignature)
	}
}

func TestVerifyHubSignature256(t *testing.T) {
	t.Parallel()
	bareHex := strings.TrimPrefix(githubSignature, "sha256=")
	tests := []struct {
		name   string
		secret string
		body   string
		header string
		want   bool
	}{
		{"github example", githubSecret, githubBody, githubSignature, true},
		{"uppercase hex", githubSecret, githubBody, "sha256=" + strings.ToUpper(bareHex), true},
		{"tampered body", githubSecret, "Hello, World?", githubSignature, false},
		{"extra byte", githubSecret, githubBody + "\n", githubSignature, false},
		{"wrong secret", "It's a secret to everybody", githubBody, githubSignature, false},
		{"missing header", githubSecret, githubBody, "", false},
		{"bare hex without sha256=", githubSecret, githubBody, bareHex, false},
		{"uppercase prefix", githubSecret, githubBody, "SHA256=" + bareHex, false},
		{"sha1 prefix", githubSecret, githubBody, "sha1=" + bareHex, false},
		{"prefix only", githubSecret, githubBody, "sha256=", false},
		{"truncated digest", githubSecret, githubBody, githubSignature[:len(githubSignature)-2], false},
		{"digest too long", githubSecret, githubBody, githubSignature + "00", false},
		{"not hex", githubSecret, githubBody, "sha256=" + strings.Repeat("g", 64), false},
		{"spaces", githubSecret, githubBody, " " + githubSignature, false},
		{"empty secret and body", "", "", "sha256=" + HMACSHA256Hex(nil, nil), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := VerifyHubSignature256([]byte(tc.secret), []byte(tc.body), tc.header); got != tc.want {
				t.Errorf("VerifyHubSignature256 = %v; want %v", got, tc.want)
			}
		})
	}
}
