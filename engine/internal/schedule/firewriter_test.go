package schedule

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// A Starter that writes fires (FireWriter, the engine on a store that keeps the fire history)
// gets the fire of each run it starts, to write with the run in one write, and the scheduler
// records that fire nowhere else: a process killed between two writes left a webhook run whose
// delivery the history did not know, and the sender's redelivery started it again. A fire that
// starts no run (the start failed) is recorded as before.
func TestAFireWriterWritesTheFireOfTheRunItStarts(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var written []Fire
	fail := false
	tr := NewTracker(func(context.Context, StartRequest) (string, error) {
		t.Error("Start called: a FireWriter's runs start through StartWritingFire")
		return "", errors.New("unexpected")
	}, func(string) bool { return false })
	tr.WriteFiresWith(func(_ context.Context, req StartRequest, f Fire) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return "", errors.New("disk full")
		}
		written = append(written, f)
		return "run-" + req.DeliveryID, nil
	})
	log := NewMemFireLog(0)
	var observed []Fire
	spec := DefaultSpec("on_push", "ingest", Trigger{Kind: KindWebhook, Path: "/push"})
	spec.MaxConcurrent = 0
	s, err := New(Config{Schedules: []Spec{spec}}, tr, log, WithFireObserver(func(f Fire) {
		mu.Lock()
		observed = append(observed, f)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	post := func(delivery string) int {
		req := httptest.NewRequest(http.MethodPost, "/push", strings.NewReader(`{}`))
		req.Header.Set(DeliveryHeader, delivery)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		return rec.Code
	}
	if code := post("d-1"); code != http.StatusAccepted {
		t.Fatalf("delivery d-1: %d", code)
	}
	mu.Lock()
	got := append([]Fire(nil), written...)
	mu.Unlock()
	if len(got) != 1 || got[0].Kind != FireFired || got[0].DeliveryID != "d-1" || got[0].ScheduleID != "on_push" ||
		got[0].Origin != OriginWebhook || got[0].RunID != "" || got[0].FiredAt.IsZero() {
		t.Fatalf("the writer got %+v; want the fired fire of delivery d-1, its run id left to the writer", got)
	}
	if fs, _ := log.Fires(context.Background(), "on_push", 0); len(fs) != 0 {
		t.Fatalf("the scheduler recorded %+v too: the writer writes it", fs)
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	if code := post("d-2"); code != http.StatusInternalServerError {
		t.Fatalf("delivery d-2, whose start failed: %d", code)
	}
	fs, _ := log.Fires(context.Background(), "on_push", 0)
	if len(fs) != 1 || fs[0].Kind != FireFailed || fs[0].DeliveryID != "d-2" {
		t.Fatalf("the failed start recorded %+v; want one failed fire of d-2", fs)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(observed) != 2 || observed[0].RunID != "run-d-1" || observed[1].Kind != FireFailed {
		t.Fatalf("the observer saw %+v; want the fired fire of run-d-1, then the failed one", observed)
	}
}
