package engine

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// dyingStore lets the first write of the recovery through (MarkInterrupted or Write, whichever
// comes first) and fails every later one, as a process killed right after that commit would.
type dyingStore struct {
	store.Store
	mu     sync.Mutex
	writes int
}

var errKilled = errors.New("the process was killed")

func (d *dyingStore) alive() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes++
	return d.writes == 1
}

func (d *dyingStore) MarkInterrupted(ctx context.Context, now time.Time, in store.Interruption) ([]string, error) {
	if !d.alive() {
		return nil, errKilled
	}
	return d.Store.MarkInterrupted(ctx, now, in)
}

func (d *dyingStore) Write(ctx context.Context, b *store.Batch) error {
	if !d.alive() {
		return errKilled
	}
	return d.Store.Write(ctx, b)
}

// A process that dies during recovery, just after its first commit, leaves every interrupted
// run with its interrupted event: the next process finds them whole. (Recovery was two commits,
// the runs marked, then their events: a crash between them left interrupted runs that no
// process would ever write an interrupted event for.)
func TestRecoveryIsOneWrite(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"memory", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "flow.db")
			open := func() store.Store {
				if kind == "memory" {
					return storeopen.Memory()
				}
				st, err := storeopen.File(ctx, path, false)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			st := open()
			// What a killed process left: a running run with a step in flight.
			t0 := time.Date(2026, 3, 8, 3, 0, 0, 0, time.UTC)
			if err := st.Write(ctx, &store.Batch{
				CreateRuns: []store.Run{{ID: "r1", Name: "wf", SpecJSON: json.RawMessage(`{"name":"wf","steps":[{"id":"a","tool":"flow__echo"}]}`),
					SpecHash: "h", Inputs: json.RawMessage(`{}`), Status: run.StatusRunning, Origin: OriginLocal, CreatedAt: t0, UpdatedAt: t0}},
				Steps:  []store.Step{{RunID: "r1", Key: "a", StepID: "a", Kind: "tool", Status: run.StepRunning, Attempt: 1, StartedAt: t0, UpdatedAt: t0}},
				Events: []run.Event{{RunID: "r1", Type: run.EventWorkflowStarted, Time: t0, Progress: run.Progress{Total: 1}}},
			}); err != nil {
				t.Fatal(err)
			}

			// The next process recovers and dies after its first commit.
			if e, err := Open(ctx, Config{StallAfterSecs: -1}, WithStore(&dyingStore{Store: st})); err == nil {
				_ = e.Close(ctx)
			}
			if kind == "sqlite" { // the dead process's lock goes with it
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				st = open()
			}

			// The process after it finds the run interrupted, with its event.
			e, err := Open(ctx, Config{StallAfterSecs: -1}, WithStore(st))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = e.Close(ctx)
				_ = st.Close()
			}()
			info, err := e.Status(ctx, "r1")
			if err != nil || info.Status != run.StatusInterrupted || info.Error == nil || info.Error.Kind != "interrupted" {
				t.Fatalf("run after the crash: %+v, %v", info, err)
			}
			evs, err := st.ListEvents(ctx, store.EventFilter{RunID: "r1"})
			if err != nil {
				t.Fatal(err)
			}
			var interrupted []run.Event
			for _, ev := range evs {
				if ev.Type == run.EventInterrupted {
					interrupted = append(interrupted, ev)
				}
			}
			if len(interrupted) != 1 || interrupted[0].Status != string(run.StatusInterrupted) || interrupted[0].Progress != info.Progress {
				t.Fatalf("interrupted events of the run: %+v (all events %+v); want exactly one, with the run's progress %+v", interrupted, evs, info.Progress)
			}
			if steps, _ := st.ListSteps(ctx, "r1"); len(steps) != 1 || steps[0].Status != run.StepInterrupted {
				t.Fatalf("steps %+v", steps)
			}
		})
	}
}
