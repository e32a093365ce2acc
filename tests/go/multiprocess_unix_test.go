//go:build unix

package gotest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// These tests stop the owner process with SIGSTOP and SIGCONT, which Windows does not have.

// TestOwnerHelperProcess is the child of the next test: it owns the database named by
// DCC_FLOW_OWNER_DB, starts a run that waits for an approval, prints "run ID" and waits.
func TestOwnerHelperProcess(t *testing.T) {
	db := os.Getenv("DCC_FLOW_OWNER_DB")
	if db == "" {
		t.Skip("helper process for TestControlWaitsForAHungOwnerThenTimesOut")
	}
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	s, _ := spec.ParseString("name: g\nsteps: [{id: gate, kind: approve}, {id: b, tool: flow__echo, args: {value: 1}, depends_on: [gate]}]")
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		fmt.Println("submit:", err)
		os.Exit(2)
	}
	waitStatus(t, e, id, run.StatusWaiting)
	fmt.Println("run", id)
	select {} // until killed
}

// A hung owner (SIGSTOP) does not hang the asker: the request times out with an error that
// says so; the request stays filed, and the owner applies it once it runs again (SIGCONT). A
// killed owner releases the database to the next process.
func TestControlWaitsForAHungOwnerThenTimesOut(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 10 s control answer timeout")
	}
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "flow.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestOwnerHelperProcess$")
	cmd.Env = append(os.Environ(), "DCC_FLOW_OWNER_DB="+db)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var id string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "run ") {
			id = strings.TrimPrefix(line, "run ")
			break
		}
	}
	if id == "" {
		t.Fatal("the owner process never started its run")
	}
	ro, err := engine.Open(ctx, engine.Config{DB: db, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close(ctx)

	_ = cmd.Process.Signal(syscall.SIGSTOP)
	err = ro.Approve(ctx, id, "gate", true, "", "td")
	if !hasCode(err, run.CodeTimeout) || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("approve with a stopped owner: %v", err)
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	if info, err := ro.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("the filed approval was not applied once the owner ran again: %v %+v", err, info)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	owner, err := engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		t.Fatalf("opening after the owner was killed: %v", err)
	}
	owner.Close(ctx)
}
