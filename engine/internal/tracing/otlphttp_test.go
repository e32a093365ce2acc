package tracing

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// The standard variables set the endpoint, headers, timeout and compression; the config's
// endpoint wins; a protocol other than http/protobuf or a bad value fails, naming the variable.
func TestSettingsFromTheStandardVariables(t *testing.T) {
	s, err := settings(Config{}, envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":           "https://otel.studio:4318/",
		"OTEL_EXPORTER_OTLP_HEADERS":            "x-team=fx, authorization=Bearer%20abc",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS":     "x-team=lighting",
		"OTEL_EXPORTER_OTLP_TIMEOUT":            "1500",
		"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "gzip",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.url != "https://otel.studio:4318/v1/traces" || s.headers["x-team"] != "lighting" || s.headers["authorization"] != "Bearer abc" ||
		s.timeout != 1500*time.Millisecond || !s.gzip {
		t.Errorf("settings %+v", s)
	}
	s, _ = settings(Config{}, envOf(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"}))
	if s.url != "http://c:4318/custom" || s.timeout != DefaultExportTimeout {
		t.Errorf("traces endpoint: %+v", s)
	}
	s, _ = settings(Config{Endpoint: "http://127.0.0.1:4318"}, envOf(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom"}))
	if s.url != "http://127.0.0.1:4318/v1/traces" {
		t.Errorf("the config's endpoint: %+v", s)
	}
	s, _ = settings(Config{}, envOf(nil))
	if s.url != "http://localhost:4318/v1/traces" {
		t.Errorf("default endpoint %q", s.url)
	}
	for env, want := range map[string]string{
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc":                "OTEL_EXPORTER_OTLP_PROTOCOL is \"grpc\"",
		"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT=5s":            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT is \"5s\": give a timeout in milliseconds",
		"OTEL_EXPORTER_OTLP_COMPRESSION=zstd":             "OTEL_EXPORTER_OTLP_COMPRESSION is \"zstd\"",
		"OTEL_EXPORTER_OTLP_ENDPOINT=collector:4318":      "is not an http:// or https:// URL",
		"OTEL_EXPORTER_OTLP_CERTIFICATE=/nonexistent.pem": "OTEL_EXPORTER_OTLP_CERTIFICATE: open /nonexistent.pem",
	} {
		k, v, _ := strings.Cut(env, "=")
		if _, err := settings(Config{}, envOf(map[string]string{k: v})); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", env, err, want)
		}
	}
	if tr, err := New(Config{Enabled: true, Getenv: envOf(map[string]string{"OTEL_SDK_DISABLED": "true"})}); tr != nil || err != nil {
		t.Errorf("OTEL_SDK_DISABLED=true: %v %v", tr, err)
	}
}

// The exporter POSTs an ExportTraceServiceRequest that the official OTLP types decode, gzipped
// when asked, with the configured headers.
func TestExportIsOTLPProtobuf(t *testing.T) {
	var mu sync.Mutex
	var got []*tracepb.TracesData
	var headers []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		var req tracepb.TracesData
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		got = append(got, &req)
		headers = append(headers, r.Header.Clone())
		mu.Unlock()
	}))
	defer srv.Close()
	for _, gz := range []string{"none", "gzip"} {
		tr, err := New(Config{Enabled: true, Endpoint: srv.URL, ServiceName: "svc", Getenv: envOf(map[string]string{
			"OTEL_EXPORTER_OTLP_COMPRESSION": gz, "OTEL_EXPORTER_OTLP_HEADERS": "x-studio=north"})})
		if err != nil {
			t.Fatal(err)
		}
		r := tr.StartRun(RunInfo{ID: "r1", Workflow: "w"})
		r.StartAttempt("a", "a", "t", 1).End("completed", "", "", "")
		r.End("completed", "", "")
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if s := tr.Stats(); s.Exported != 2 || s.Failed != 0 {
			t.Errorf("%s: stats %+v", gz, s)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d requests", len(got))
	}
	for i, req := range got {
		n := 0
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				n += len(ss.Spans)
			}
		}
		if n != 2 || headers[i].Get("x-studio") != "north" || headers[i].Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("request %d: %d spans, headers %v", i, n, headers[i])
		}
	}
}
