package gotest

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// crashSpec has 200 step instances: a short sequential prefix and a 196-item foreach.
const crashSpec = `
name: crash_intake
steps:
  - {id: a, tool: work, args: {k: a}}
  - {id: b, tool: work, args: {k: b}}
  - {id: c, tool: work, args: {k: c}}
  - id: per_file
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 4
    steps: [{id: export, tool: work, args: {k: "{{item}}"}}]
`

func crashItems() []any {
	items := make([]any, 196)
	for i := range items {
		items[i] = fmt.Sprintf("f%03d", i)
	}
	return items
}

// serveWork answers "work" host calls until ctx ends, calling seen(key) for each.
func serveWork(ctx context.Context, e *engine.Engine, seen func(string)) {
	for ctx.Err() == nil {
		calls, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 8, Timeout: 20 * time.Millisecond})
		if err != nil {
			return
		}
		for _, c := range calls {
			k := c.Args["k"].(string)
			time.Sleep(time.Millisecond)
			seen(k)
			_ = e.Host().Complete(c.ID, flowtype.ToolResult{Output: map[string]any{"done": k}})
		}
	}
}

// TestCrashHelperProcess is the child: it runs crashSpec on the database named by
// DCC_FLOW_CRASH_DB and prints "called N" after each tool call until it is killed.
func TestCrashHelperProcess(t *testing.T) {
	db := os.Getenv("DCC_FLOW_CRASH_DB")
	if db == "" {
		t.Skip("helper process for TestCrashRecoveryAndResume")
	}
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "work", Lane: flowtype.LaneMain}); err != nil {
		os.Exit(2)
	}
	s, _ := spec.ParseString(crashSpec)
	var n int
	var mu sync.Mutex
	go serveWork(ctx, e, func(string) {
		mu.Lock()
		n++
		fmt.Printf("called %d\n", n)
		mu.Unlock()
	})
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s, Inputs: map[string]any{"items": crashItems()}})
	if err != nil {
		fmt.Println("submit:", err)
		os.Exit(2)
	}
	fmt.Println("run", id)
	_, _ = e.Wait(ctx, id, time.Minute)
	fmt.Println("finished")
	select {} // wait to be killed
}

func TestCrashRecoveryAndResume(t *testing.T) {
	t.Parallel()
	for _, killAt := range []int{2, 60, 150} {
		killAt := killAt
		t.Run(fmt.Sprintf("kill after %d calls", killAt), func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "flow.db")
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$")
			cmd.Env = append(os.Environ(), "DCC_FLOW_CRASH_DB="+db)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var runID string
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				if strings.HasPrefix(line, "run ") {
					runID = strings.TrimPrefix(line, "run ")
				}
				if strings.HasPrefix(line, "called ") {
					if n, _ := strconv.Atoi(strings.TrimPrefix(line, "called ")); n >= killAt {
						break
					}
				}
				if line == "finished" {
					t.Fatal("the child finished before it was killed")
				}
			}
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			if runID == "" {
				t.Fatal("the child never started its run")
			}

			// The file is intact.
			raw, err := sql.Open("sqlite", db)
			if err != nil {
				t.Fatal(err)
			}
			var check string
			if err := raw.QueryRow("PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
				t.Fatalf("integrity_check: %q %v", check, err)
			}
			raw.Close()

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e, err := engine.Open(ctx, engine.Config{DB: db})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(context.Background())
			info, err := e.Status(ctx, runID)
			if err != nil || info.Status != run.StatusInterrupted {
				t.Fatalf("after reopening: %v %+v", err, info)
			}
			var last run.Event
			for from := uint64(0); ; {
				evs, _ := e.PollEvents(ctx, engine.EventQuery{RunID: runID, FromSeq: from}, 0)
				if len(evs) == 0 {
					break
				}
				last = evs[len(evs)-1]
				from = last.Seq + 1
			}
			if last.Type != run.EventInterrupted {
				t.Fatalf("last event %s, want interrupted", last.Type)
			}
			steps, _ := e.Steps(ctx, runID)
			committed := map[string]bool{}
			for _, st := range steps {
				if st.Status == run.StepCompleted && st.Kind == "tool" {
					committed[st.Output.(map[string]any)["done"].(string)] = true
				}
			}
			if len(committed) == 0 || len(committed) >= 199 {
				t.Fatalf("%d steps committed before the kill at %d calls", len(committed), killAt)
			}
			// The interrupted run's progress counts what the dead process committed: every step
			// instance in a finished status (those left running are interrupted now), of the
			// 4 planned before per_file expands, 200 after (3 + per_file + 196 iterations).
			finished, expanded, started := 0, false, false
			for _, st := range steps {
				if st.Status.Terminal() {
					finished++
				}
				expanded = expanded || strings.HasPrefix(st.Key, "per_file[")
				started = started || st.Key == "per_file"
			}
			totalOK := info.Progress.Total == 4 && !expanded || info.Progress.Total == 200 && started
			if info.Progress.Completed != finished || finished < len(committed) || !totalOK {
				t.Fatalf("the interrupted run shows progress %+v with %d step instances finished (%d tool steps completed; foreach iterations written: %v)",
					info.Progress, finished, len(committed), expanded)
			}
			if runs, err := e.Runs(ctx, engine.RunFilter{Name: "crash_intake"}); err != nil || len(runs) != 1 || runs[0].Progress != info.Progress {
				t.Fatalf("the run list shows %+v (%v); want progress %+v", runs, err, info.Progress)
			}

			if err := e.RegisterTool(flowtype.ToolInfo{Name: "work", Lane: flowtype.LaneMain}); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			again := map[string]int{}
			go serveWork(ctx, e, func(k string) { mu.Lock(); again[k]++; mu.Unlock() })
			resumed, err := e.ResumeInterrupted(ctx)
			if err != nil || len(resumed) != 1 || resumed[0] != runID {
				t.Fatalf("resume: %v %v", resumed, err)
			}
			info, err = e.Wait(ctx, runID, time.Minute)
			if err != nil || info.Status != run.StatusCompleted {
				t.Fatalf("after resume: %v %+v", err, info)
			}
			mu.Lock()
			defer mu.Unlock()
			for k := range committed {
				if again[k] > 0 {
					t.Errorf("step %s was committed before the crash but ran again", k)
				}
			}
			if got := len(committed) + len(again); got != 199 {
				t.Errorf("%d committed + %d re-run = %d, want 199 tool steps", len(committed), len(again), got)
			}
		})
	}
}
