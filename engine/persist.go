package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// recover marks the runs a previous process left unfinished as interrupted, each with an
// interrupted event, in one atomic store write (a crash during recovery leaves both or
// neither): a crash leaves runs interrupted, and Resume finishes them
// (docs/reference/state-machine.md, "Crashes and the one owner").
func (e *Engine) recover(ctx context.Context) error {
	detail, _ := json.Marshal(map[string]string{"reason": "the process running it stopped before it finished"})
	_, err := e.store.MarkInterrupted(ctx, e.clock.Now(), store.Interruption{Detail: detail,
		Error: &store.RunError{Kind: "interrupted", Message: "the process running this run stopped before it finished; resume it"}})
	if err != nil {
		return fmt.Errorf("recovering interrupted runs: %w", err)
	}
	return nil
}

// Interrupted returns the ids of the runs that are interrupted, newest first: the candidates for
// ResumeInterrupted once their host tools are registered.
func (e *Engine) Interrupted(ctx context.Context) ([]string, error) {
	runs, err := e.store.ListRuns(ctx, store.RunFilter{Statuses: []run.Status{run.StatusInterrupted}})
	if err != nil {
		return nil, notFound("", err)
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return ids, nil
}

// ResumeInterrupted resumes every interrupted run (call it once the host tools are registered).
// It returns the ids resumed; a run that cannot resume (e.g. a tool is still unknown) is left
// interrupted and reported in the joined error.
func (e *Engine) ResumeInterrupted(ctx context.Context) ([]string, error) {
	if e.cfg.ReadOnly {
		return nil, e.errReadOnly("resume runs")
	}
	ids, err := e.Interrupted(ctx)
	if err != nil {
		return nil, err
	}
	var resumed []string
	var errs []error
	for _, id := range ids {
		if _, err := e.Resume(ctx, id, ResumeOptions{By: "resume_interrupted"}); err != nil {
			errs = append(errs, fmt.Errorf("run %s: %w", id, err))
			continue
		}
		resumed = append(resumed, id)
	}
	return resumed, errors.Join(errs...)
}

// Prune deletes the finished runs that ended before olderThan, with their steps, events and
// workflow-scoped idempotency entries (global idempotency entries and artefacts stay), and
// returns how many it deleted. statuses narrows it to some finished statuses (completed,
// failed, cancelled, interrupted); none means all four. A run that has not finished is never
// deleted, and naming a status that is not a finished one is code invalid_request. A store
// given with WithStore that has no Prune (store.Pruner) makes it code invalid_state. Both
// built-in stores prune: an in-memory engine gives the memory of what it deleted back. Event sequence numbers
// of deleted events are not used again. It is PruneRuns without a limit, dry run or progress:
// the SQLite store deletes 200 runs per transaction.
func (e *Engine) Prune(ctx context.Context, olderThan time.Time, statuses ...run.Status) (int, error) {
	res, err := e.PruneRuns(ctx, PruneOptions{FinishedBefore: olderThan, Statuses: statuses})
	return res.Pruned, err
}

// SetForkHook makes fn hear about the descriptors holding the owner locks of file databases
// (fd, held=true once locked; held=false just before they are closed). flock and OFD locks
// follow a descriptor into a child forked without exec, which would keep the database locked
// after its owner is gone; the C library (capi) closes them in such children with
// pthread_atfork. Go programs that fork only to exec need nothing: the descriptors are
// close-on-exec.
func SetForkHook(fn func(fd int, held bool)) { storeopen.SetForkHook(fn) }
