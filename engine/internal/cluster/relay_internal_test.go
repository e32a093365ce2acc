package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// fakeReports is a store.CallQueue that records ReportCall and answers it with answer.
type fakeReports struct {
	store.CallQueue
	mu     sync.Mutex
	got    []store.CallReport
	answer func(n int) (bool, error) // n: 1 for the first write
}

func (f *fakeReports) ReportCall(_ context.Context, _ int64, r store.CallReport) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, r)
	return f.answer(len(f.got))
}

func (f *fakeReports) writes() []store.CallReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]store.CallReport(nil), f.got...)
}

func line(s string) run.LogLine { return run.LogLineOf(s, nil) }

// A relay whose write finds the call no longer claimed by its engine writes nothing more, not
// even at finish; a write the database refused is not lost silently: its lines are counted as
// dropped in the next row, which also carries its progress; lines past MaxLogLinesPerFlush
// between two rows are counted as dropped; the last report waits for no interval at finish.
func TestRelay(t *testing.T) {
	lost := &fakeReports{answer: func(int) (bool, error) { return false, nil }}
	r := newRelay(lost, 1, clock.New())
	r.Report(tools.Report{Logs: []run.LogLine{line("a")}})
	deadline := time.Now().Add(5 * time.Second)
	for len(lost.writes()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(relayInterval + 50*time.Millisecond)
	r.Report(tools.Report{Logs: []run.LogLine{line("b")}})
	r.finish()
	if w := lost.writes(); len(w) != 1 {
		t.Fatalf("a relay whose claim was lost wrote %d rows: %+v", len(w), w)
	}

	flaky := &fakeReports{answer: func(n int) (bool, error) {
		if n == 1 {
			return false, errors.New("the database is away")
		}
		return true, nil
	}}
	r = newRelay(flaky, 2, clock.New())
	r.Report(tools.Report{Progress: &run.StepProgress{Done: 1}, Logs: []run.LogLine{line("a"), line("b")}, Dropped: 3})
	for len(flaky.writes()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	var many []run.LogLine
	for range run.MaxLogLinesPerFlush + 7 {
		many = append(many, line("x"))
	}
	r.Report(tools.Report{Logs: many})
	r.finish() // at once, not a relay interval later
	w := flaky.writes()
	if len(w) != 2 || w[0].Seq != 1 || w[1].Seq != 2 {
		t.Fatalf("writes: %+v", w)
	}
	last := w[1]
	if last.Progress == nil || last.Progress.Done != 1 || len(last.Lines) != run.MaxLogLinesPerFlush || last.Dropped != 2+3+7 {
		t.Fatalf("the row after a refused one: progress %+v, %d lines, dropped %d; want progress 1, %d lines, 12 dropped",
			last.Progress, len(last.Lines), last.Dropped, run.MaxLogLinesPerFlush)
	}
	r.Report(tools.Report{Logs: []run.LogLine{line("late")}})
	time.Sleep(relayInterval + 50*time.Millisecond)
	if n := len(flaky.writes()); n != 2 {
		t.Fatalf("a report after finish was written (%d rows)", n)
	}
}
