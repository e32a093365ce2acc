package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// CommitStore is a store with the CommitObserver feature that counts its transactions (the SQL
// stores' Commits).
type CommitStore interface {
	store.Store
	store.CommitObserver
	Commits() int64
}

// ExerciseCommitObserver checks store.CommitObserver: each committed transaction is reported
// with its batches (their sum is the writes that landed, and the reports are the store's
// commits) and a positive duration, by the time the Write returns; nil stops the reports.
// newStore must return a new, empty store.
func ExerciseCommitObserver(t *testing.T, newStore func(t *testing.T) CommitStore) {
	ctx := context.Background()
	s := newStore(t)
	var mu sync.Mutex
	var commits []store.Commit
	before := s.Commits()
	s.ObserveCommits(func(c store.Commit) {
		mu.Lock()
		commits = append(commits, c)
		mu.Unlock()
	})
	now := time.Now()
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r", Name: "w", SpecJSON: json.RawMessage(`{}`), Status: run.StatusRunning, CreatedAt: now, UpdatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	const writers = 50
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			b := &store.Batch{Events: []run.Event{{RunID: "r", Type: run.EventStepExit, StepKey: fmt.Sprintf("s%d", i), Time: now}}}
			if err := s.Write(ctx, b); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	got, batches := len(commits), 0
	for _, c := range commits {
		batches += c.Batches
		if c.Batches < 1 || c.Duration <= 0 {
			t.Errorf("commit %+v: want ≥ 1 batch and a positive duration", c)
		}
	}
	mu.Unlock()
	if made := s.Commits() - before; batches != writers+1 || int64(got) != made {
		t.Fatalf("%d commits reported holding %d batches; the store made %d commits of %d writes", got, batches, made, writers+1)
	}
	t.Logf("%d writes in %d reported commits", writers+1, got)
	s.ObserveCommits(nil)
	if err := s.Write(ctx, &store.Batch{Events: []run.Event{{RunID: "r", Type: run.EventStepExit, Time: now}}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(commits) != got || s.Commits()-before != int64(got)+1 {
		t.Fatalf("%d commits reported after ObserveCommits(nil), want %d (the store made %d)", len(commits), got, s.Commits()-before)
	}
}
