package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// exporter is the span exporter of the queue (sdktrace.SpanExporter): it encodes each batch
// as an OTLP ExportTraceServiceRequest (otlpproto.go) and POSTs it in protobuf (OTLP/HTTP). The
// SDK's otlptracehttp exporter does the same but links gRPC and its gateway into the library
// (+2.5 MB) and spends ~5 µs and ~20 allocations a span building and marshalling its messages.
// Only the queue's goroutine calls it.
type exporter struct {
	url     string
	headers map[string]string
	gzip    bool
	client  *http.Client
	enc     encoder
	zbuf    bytes.Buffer
	zw      *gzip.Writer
}

// exportSettings are the exporter's settings from Config and the standard OTEL_EXPORTER_OTLP_*
// variables (the TRACES_ form of each wins over the general one).
type exportSettings struct {
	url     string
	headers map[string]string
	gzip    bool
	timeout time.Duration
	tls     *tls.Config // nil = the default
}

// settings reads the exporter's settings: endpoint (Config.Endpoint, else
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces,
// else http://localhost:4318/v1/traces), headers, timeout (milliseconds; DefaultExportTimeout
// when unset), compression (gzip or none), certificate, client certificate and key. A protocol
// other than http/protobuf is an error naming the variable.
func settings(cfg Config, getenv func(string) string) (exportSettings, error) {
	env := func(name string) (string, string) { // the value and the variable it came from
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_" + name)); v != "" {
			return v, "OTEL_EXPORTER_OTLP_TRACES_" + name
		}
		return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_" + name)), "OTEL_EXPORTER_OTLP_" + name
	}
	s := exportSettings{timeout: DefaultExportTimeout, headers: map[string]string{}}
	if p, from := env("PROTOCOL"); p != "" && p != "http/protobuf" {
		return s, fmt.Errorf("%s is %q: dcc-flow exports OTLP over HTTP/protobuf only (the collector's port 4318); set it to http/protobuf or unset it", from, p)
	}
	switch {
	case cfg.Endpoint != "":
		u, _ := url.Parse(cfg.Endpoint) // checked
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		s.url = u.String()
	case strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) != "":
		s.url = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	case strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) != "":
		s.url = strings.TrimRight(strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")), "/") + "/v1/traces"
	default:
		s.url = "http://localhost:4318/v1/traces"
	}
	if u, err := url.Parse(s.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return s, fmt.Errorf("the trace endpoint %q is not an http:// or https:// URL (the endpoint setting or OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT)", s.url)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		for _, kv := range strings.Split(getenv(name), ",") {
			k, v, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				continue
			}
			if dv, err := url.PathUnescape(strings.TrimSpace(v)); err == nil {
				s.headers[k] = dv
			}
		}
	}
	if t, from := env("TIMEOUT"); t != "" {
		ms, err := strconv.Atoi(t)
		if err != nil || ms <= 0 {
			return s, fmt.Errorf("%s is %q: give a timeout in milliseconds, such as 5000", from, t)
		}
		s.timeout = time.Duration(ms) * time.Millisecond
	}
	switch c, from := env("COMPRESSION"); c {
	case "", "none":
	case "gzip":
		s.gzip = true
	default:
		return s, fmt.Errorf("%s is %q: give gzip or none", from, c)
	}
	ca, caFrom := env("CERTIFICATE")
	cert, _ := env("CLIENT_CERTIFICATE")
	key, _ := env("CLIENT_KEY")
	if ca != "" || cert != "" || key != "" {
		s.tls = &tls.Config{MinVersion: tls.VersionTLS12}
		if ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return s, fmt.Errorf("%s: %v", caFrom, err)
			}
			s.tls.RootCAs = x509.NewCertPool()
			if !s.tls.RootCAs.AppendCertsFromPEM(pem) {
				return s, fmt.Errorf("%s: %s holds no PEM certificate", caFrom, ca)
			}
		}
		if cert != "" || key != "" {
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return s, fmt.Errorf("OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_CERTIFICATE and _CLIENT_KEY: %v", err)
			}
			s.tls.Certificates = []tls.Certificate{pair}
		}
	}
	return s, nil
}

func newExporter(s exportSettings) *exporter {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if s.tls != nil {
		tr.TLSClientConfig = s.tls
	}
	return &exporter{url: s.url, headers: s.headers, gzip: s.gzip, client: &http.Client{Transport: tr, Timeout: s.timeout}}
}

// Shutdown closes the idle connections.
func (x *exporter) Shutdown(context.Context) error {
	x.client.CloseIdleConnections()
	return nil
}

// maxAnswer is the most of a collector's answer read (the rest is not needed).
const maxAnswer = 64 << 10

// ExportSpans POSTs spans as one ExportTraceServiceRequest.
func (x *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	body := x.enc.request(spans)
	if x.gzip {
		x.zbuf.Reset()
		if x.zw == nil {
			x.zw = gzip.NewWriter(&x.zbuf)
		} else {
			x.zw.Reset(&x.zbuf)
		}
		_, _ = x.zw.Write(body)
		_ = x.zw.Close()
		body = x.zbuf.Bytes()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range x.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("User-Agent", "dcc-flow OTel-OTLP-Exporter-Go/"+otel.Version())
	if x.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := x.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode/100 != 2 {
		return errors.New("the collector answered " + resp.Status)
	}
	return nil
}
