package openlineage

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
)

func benchEvent(files int) Event {
	ev := sampleEvent(Complete)
	ev.Inputs = nil
	for i := range files {
		ev.Inputs = append(ev.Inputs, Dataset{Path: fmt.Sprintf("/mnt/show/sh010/plates/plate.%04d.exr", i), Hash: "blake3:" + fmt.Sprintf("%064x", i), Size: 12 << 20})
	}
	return ev
}

// What Emit costs its caller: encoding the event (the queue send does not wait).
func BenchmarkMarshal(b *testing.B) {
	for _, files := range []int{1, 100, MaxDatasets} {
		ev := benchEvent(files)
		b.Run(fmt.Sprintf("inputs=%d", files), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Marshal(Config{}, ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Delivery throughput (Emit to delivered, Close included) to an endpoint on 127.0.0.1 that answers at once (one event per POST,
// kept-alive connection), and to a JSON-lines file.
func BenchmarkDeliver(b *testing.B) {
	ev := benchEvent(10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	for name, cfg := range map[string]Config{
		"http": {URL: srv.URL, QueueSize: 1 << 16},
		"file": {File: filepath.Join(b.TempDir(), "l.jsonl"), QueueSize: 1 << 16},
	} {
		b.Run(name, func(b *testing.B) {
			em, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				em.Emit(ev)
			}
			err = em.Close(context.Background()) // timed: ns/op is per event delivered
			b.StopTimer()
			if err != nil || em.Dropped()+em.Failed() != 0 {
				b.Fatalf("close %v, dropped %d, failed %d", err, em.Dropped(), em.Failed())
			}
		})
	}
}
