// Command webhookload measures the webhook handler's throughput: it serves a Scheduler's
// Handler on 127.0.0.1:0 with a Starter that only counts, hammers it with concurrent
// keep-alive clients sending HMAC-signed JSON bodies for a fixed duration, and prints the
// accepted (202) requests per second. It stops by itself.
//
//	go run ./scripts/webhookload [-duration 3s] [-clients 32] [-body 1024] [-min 10000]
//
// (scripts/webhookload runs this program: Go's internal-package rule keeps code outside
// engine/ from importing engine/internal/schedule.)
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/schedule"
)

// countingStarter starts nothing; it hands out run ids.
type countingStarter struct{ n atomic.Int64 }

func (c *countingStarter) Start(context.Context, schedule.StartRequest) (string, error) {
	return "run-" + strconv.FormatInt(c.n.Add(1), 10), nil
}

func (*countingStarter) Active(context.Context, string) (int, error) { return 0, nil }

func main() {
	duration := flag.Duration("duration", 3*time.Second, "how long to send requests")
	clients := flag.Int("clients", 32, "concurrent keep-alive clients")
	bodySize := flag.Int("body", 1024, "request body size in bytes (a JSON object)")
	deliveries := flag.Bool("delivery-ids", true, "send a unique X-GitHub-Delivery id per request (exercises dedup)")
	minRate := flag.Float64("min", 0, "exit with status 1 if fewer accepted req/s than this")
	flag.Parse()
	if err := run(*duration, *clients, *bodySize, *deliveries, *minRate); err != nil {
		fmt.Fprintln(os.Stderr, "webhookload:", err)
		os.Exit(1)
	}
}

func run(duration time.Duration, clients, bodySize int, deliveries bool, minRate float64) error {
	if duration <= 0 || clients <= 0 || bodySize < 32 {
		return errors.New("-duration and -clients must be positive and -body at least 32")
	}
	const secret = "load-test-secret"
	spec := schedule.DefaultSpec("load", "ingest", schedule.Trigger{Kind: schedule.KindWebhook, Path: "/webhooks/load", SecretEnv: "LOAD_SECRET"})
	spec.MaxConcurrent = 0
	spec.Inputs = map[string]any{"path": "{{trigger.payload.file_path}}", "size": "{{trigger.payload.size}}"}
	starter := &countingStarter{}
	s, err := schedule.New(schedule.Config{
		Schedules: []schedule.Spec{spec},
		LookupEnv: func(string) (string, bool) { return secret, true },
	}, starter, schedule.NewMemFireLog(0))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()

	prefix := `{"file_path": "/uploads/shot_010/a.ma", "size": 42, "pad": "`
	body := []byte(prefix + strings.Repeat("x", max(0, bodySize-len(prefix)-2)) + `"}`)
	signature := "sha256=" + schedule.HMACSHA256Hex([]byte(secret), body)
	url := "http://" + ln.Addr().String() + "/webhooks/load"
	tr := &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var (
		accepted atomic.Int64
		mu       sync.Mutex
		statuses = map[int]int{}
		errs     []string
		lat      []time.Duration
		wg       sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(duration)
	for c := range clients {
		wg.Go(func() {
			var local []time.Duration
			other := map[int]int{}
			var firstErr string
			for i := 0; time.Now().Before(deadline); i++ {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(schedule.SignatureHeader, signature)
				if deliveries {
					req.Header.Set(schedule.DeliveryHeader, "c"+strconv.Itoa(c)+"-"+strconv.Itoa(i))
				}
				t := time.Now()
				res, err := client.Do(req)
				if err != nil {
					if firstErr == "" {
						firstErr = err.Error()
					}
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusAccepted {
					accepted.Add(1)
					local = append(local, time.Since(t))
				} else {
					other[res.StatusCode]++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, local...)
			for k, v := range other {
				statuses[k] += v
			}
			if firstErr != "" {
				errs = append(errs, firstErr)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := accepted.Load()
	rate := float64(n) / elapsed.Seconds()
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	fmt.Printf("webhook load: %d clients, %s, %d-byte JSON bodies, HMAC-SHA256 on, delivery ids %v, GOMAXPROCS %d\n",
		clients, duration, len(body), deliveries, runtime.GOMAXPROCS(0))
	fmt.Printf("accepted: %d requests in %.2fs = %.0f req/s (p50 %s, p99 %s)\n", n, elapsed.Seconds(), rate,
		pct(0.50).Round(time.Microsecond), pct(0.99).Round(time.Microsecond))
	if len(statuses) > 0 || len(errs) > 0 {
		fmt.Printf("other statuses: %v; client errors: %d %q\n", statuses, len(errs), errs)
	}
	if starter.n.Load() != n {
		return fmt.Errorf("%d runs started for %d accepted requests", starter.n.Load(), n)
	}
	if rate < minRate {
		return fmt.Errorf("%.0f accepted req/s is below -min %.0f", rate, minRate)
	}
	return nil
}
