package schedule

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// countingStarter is a Starter that does nothing but count.
type countingStarter struct{ n atomic.Int64 }

func (c *countingStarter) Start(context.Context, StartRequest) (string, error) {
	return fmt.Sprint("run-", c.n.Add(1)), nil
}
func (*countingStarter) Active(context.Context, string) (int, error) { return 0, nil }

func BenchmarkWebhookHMAC(b *testing.B) {
	secret := []byte(testSecret)
	for _, size := range []int{1 << 10, 64 << 10} {
		body := bytes.Repeat([]byte("x"), size)
		header := "sha256=" + HMACSHA256Hex(secret, body)
		b.Run(fmt.Sprintf("verify/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if !VerifyHubSignature256(secret, body, header) {
					b.Fatal("signature")
				}
			}
		})
	}
	// The whole handler in process: routing, body read, pooled HMAC, JSON, admission, reply.
	body := []byte(`{"file_path": "/in/a.ma", "size": 42, "pad": "` + strings.Repeat("x", 900) + `"}`)
	sig := "sha256=" + HMACSHA256Hex(secret, body)
	sp := DefaultSpec("hook", "wf", Trigger{Kind: KindWebhook, Path: "/hook", SecretEnv: "S"})
	sp.MaxConcurrent = 0
	sp.Inputs = map[string]any{"path": "{{trigger.payload.file_path}}"}
	s, err := New(Config{Schedules: []Spec{sp}, LookupEnv: func(string) (string, bool) { return testSecret, true }},
		&countingStarter{}, NewMemFireLog(0))
	if err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	b.Run("handler/1KiB", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				req := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(body))
				req.Header.Set(SignatureHeader, sig)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusAccepted {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	})
}
