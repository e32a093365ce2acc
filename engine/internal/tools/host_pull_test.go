package tools

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

func enqueue(t *testing.T, h *Host, lane, runID, tool string) <-chan Result {
	t.Helper()
	ch := make(chan Result, 1)
	go func() {
		res, err := h.Call(context.Background(), lane, Call{RunID: runID, StepKey: tool, Tool: tool})
		if err == nil {
			ch <- res
		}
		close(ch)
	}()
	return ch
}

// enqueueInOrder queues one call per {lane, run, tool} triple, each after the one before is
// queued, and returns their answer channels.
func enqueueInOrder(t *testing.T, h *Host, calls ...[3]string) []<-chan Result {
	t.Helper()
	out := make([]<-chan Result, len(calls))
	base := h.Pending()
	for i, c := range calls {
		out[i] = enqueue(t, h, c[0], c[1], c[2])
		waitPending(t, h, base+i+1)
	}
	return out
}

func waitPending(t *testing.T, h *Host, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.Pending() < n {
		if time.Now().After(deadline) {
			t.Fatalf("pending %d, want %d", h.Pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPullFiltersByRunAndLanes(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	answers := enqueueInOrder(t, h, [3]string{LaneMain, "a", "a1"}, [3]string{LaneMain, "b", "b1"}, [3]string{LaneWorker, "a", "a2"})

	// Run b's call is taken from the middle of the main queue.
	got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}, RunID: "b", Max: 5})
	if err != nil || len(got) != 1 || got[0].Tool != "b1" {
		t.Fatalf("pull b: %+v %v", got, err)
	}
	// Run a over both lanes gets both of its calls.
	got, err = h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain, LaneWorker}, RunID: "a", Max: 5})
	if err != nil || len(got) != 2 || got[0].Tool != "a1" || got[1].Tool != "a2" {
		t.Fatalf("pull a: %+v %v", got, err)
	}
	for _, c := range append(got, PendingCall{ID: 2}) {
		if err := h.Complete(c.ID, Result{Output: c.Tool}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range answers {
		if _, ok := <-ch; !ok {
			t.Fatal("a call was not answered")
		}
	}
	// Nothing left: the main lane's dead entry is skipped.
	if got, _ := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}}); len(got) != 0 {
		t.Fatalf("left over: %+v", got)
	}
}

func TestPullWakesOnEitherLaneAndStops(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	var got []PendingCall
	go func() {
		defer wg.Done()
		got, _ = h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain, LaneWorker}, Timeout: 10 * time.Second})
	}()
	done := enqueue(t, h, LaneWorker, "r", "w")
	wg.Wait()
	if len(got) != 1 || got[0].Tool != "w" {
		t.Fatalf("%+v", got)
	}
	_ = h.Complete(got[0].ID, Result{})
	<-done

	stop := make(chan struct{})
	start := time.Now()
	go func() { time.Sleep(20 * time.Millisecond); close(stop) }()
	got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}, Timeout: 10 * time.Second, Stop: stop})
	if err != nil || len(got) != 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("stop: %+v %v after %v", got, err, time.Since(start))
	}
	if _, err := h.Pull(context.Background(), PullRequest{Lanes: []string{"gpu"}}); err == nil {
		t.Fatal("unknown lane accepted")
	}
}

func pullN(t *testing.T, h *Host, req PullRequest) []string {
	t.Helper()
	got, err := h.Pull(context.Background(), req)
	if err != nil {
		t.Fatalf("pull %+v: %v", req, err)
	}
	tools := make([]string, len(got))
	for i, c := range got {
		tools[i] = c.Tool
	}
	return tools
}

func TestReleaseHandsCallsBackToTheFront(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	answers := enqueueInOrder(t, h, [3]string{LaneMain, "a", "a1"}, [3]string{LaneMain, "b", "b1"}, [3]string{LaneMain, "a", "a2"})

	p1, err := h.OpenPuller("")
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := h.OpenPuller("")
	// b1 is taken from the middle of the queue, then handed back: it goes to the front, and the
	// entry it left in the middle does not hand it out a second time.
	got, _ := h.Pull(context.Background(), PullRequest{RunID: "b", Max: 5, Puller: p1})
	if len(got) != 1 || got[0].Tool != "b1" {
		t.Fatalf("pull b: %+v", got)
	}
	b1ID := got[0].ID
	if n, err := h.Release(p2, []uint64{b1ID}); err != nil || n != 0 {
		t.Fatalf("another puller handed back b1: %d %v", n, err)
	}
	if n, err := h.Release(p1, []uint64{b1ID, 999}); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if tools := pullN(t, h, PullRequest{Max: 5, Puller: p2}); fmt.Sprint(tools) != "[b1 a1 a2]" {
		t.Fatalf("after release: %v", tools)
	}
	// p1 no longer holds b1: completing it is still fine (any thread may answer), releasing is not.
	if n, _ := h.Release(p1, []uint64{b1ID}); n != 0 {
		t.Fatal("p1 handed back a call it no longer holds")
	}
	// Closing p2 hands back all three; they come out in the order they were first queued.
	if n := h.ClosePuller(p2); n != 3 {
		t.Fatalf("close puller handed back %d, want 3", n)
	}
	if _, err := h.Pull(context.Background(), PullRequest{Puller: p2}); run.CodeOf(err) != run.CodeNotFound {
		t.Fatalf("pull with a closed puller: %v", err)
	}
	got, _ = h.Pull(context.Background(), PullRequest{Max: 5, Puller: p1})
	if len(got) != 3 || got[0].Tool != "a1" || got[1].Tool != "b1" || got[2].Tool != "a2" {
		t.Fatalf("after close: %+v", got)
	}
	for _, c := range got {
		if err := h.Complete(c.ID, Result{Output: c.Tool}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range answers {
		if _, ok := <-ch; !ok {
			t.Fatal("a call was not answered")
		}
	}
	if n := h.ClosePuller(p1); n != 0 {
		t.Fatalf("answered calls handed back: %d", n)
	}
	if h.Pending() != 0 {
		t.Fatalf("pending %d", h.Pending())
	}
}

func TestCancelledCallsAreNeitherHandedOutNorHandedBack(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	ctx1, cancel1 := context.WithCancel(context.Background())
	ctx2, cancel2 := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	for _, c := range []struct {
		ctx  context.Context
		tool string
	}{{ctx1, "one"}, {ctx2, "two"}} {
		go func() {
			_, err := h.Call(c.ctx, LaneMain, Call{RunID: "r", Tool: c.tool})
			errs <- err
		}()
		waitPending(t, h, map[string]int{"one": 1, "two": 2}[c.tool])
	}
	p, _ := h.OpenPuller("")
	got, _ := h.Pull(context.Background(), PullRequest{Puller: p})
	if len(got) != 1 || got[0].Tool != "one" {
		t.Fatalf("%+v", got)
	}
	// Both steps give up. The queued call is not handed out, even before its step's goroutine
	// has withdrawn it; the pulled one is withdrawn, not handed back.
	cancel2()
	if tools := pullN(t, h, PullRequest{Max: 5, Puller: p}); len(tools) != 0 {
		t.Fatalf("a cancelled call was handed out: %v", tools)
	}
	cancel1()
	if n, err := h.Release(p, []uint64{got[0].ID}); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if tools := pullN(t, h, PullRequest{Max: 5, Puller: p}); len(tools) != 0 {
		t.Fatalf("a cancelled call was handed back out: %v", tools)
	}
	for range 2 {
		if err := <-errs; err == nil {
			t.Fatal("a cancelled call returned no error")
		}
	}
	waitPending(t, h, 0)
}

func TestReleaseWakesAWaitingPuller(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	done := enqueue(t, h, LaneWorker, "r", "w")
	waitPending(t, h, 1)
	p1, _ := h.OpenPuller("")
	p2, _ := h.OpenPuller("")
	got, _ := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneWorker}, Puller: p1})
	if len(got) != 1 {
		t.Fatalf("%+v", got)
	}
	woken := make(chan []PendingCall, 1)
	go func() {
		c, _ := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneWorker}, Puller: p2, Timeout: time.Minute})
		woken <- c
	}()
	time.Sleep(20 * time.Millisecond) // let it park (a wake-up before parking is also fine)
	h.ClosePuller(p1)
	select {
	case c := <-woken:
		if len(c) != 1 || c[0].ID != got[0].ID {
			t.Fatalf("%+v", c)
		}
		_ = h.Complete(c[0].ID, Result{})
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting puller was not woken by the handed-back call")
	}
	<-done
	if _, err := h.Release(77, nil); run.CodeOf(err) != run.CodeNotFound {
		t.Fatalf("unknown puller: %v", err)
	}
}

// The lane forgets a run once it has no queued call, and its queues shrink back: nothing is
// kept per finished run.
func TestLaneKeepsNothingOfDrainedRuns(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(1)
		c := ctx
		if i%3 != 0 {
			c = context.Background()
		}
		go func() {
			defer wg.Done()
			_, _ = h.Call(c, LaneMain, Call{RunID: fmt.Sprint("r", i%100), Tool: "t"})
		}()
	}
	waitPending(t, h, 300)
	cancel() // a third of them give up while queued
	p, _ := h.OpenPuller("")
	for pulled := 0; pulled < 200; {
		got, err := h.Pull(context.Background(), PullRequest{RunID: fmt.Sprint("r", pulled%100), Max: 2, Puller: p})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range got {
			_ = h.Complete(c.ID, Result{})
			pulled++
		}
		if len(got) == 0 { // this run has none left: take any
			got, _ = h.Pull(context.Background(), PullRequest{Max: 1, Puller: p, Timeout: time.Second})
			for _, c := range got {
				_ = h.Complete(c.ID, Result{})
				pulled++
			}
		}
	}
	wg.Wait()
	waitPending(t, h, 0)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drainLocked()
	ln := h.lanes[LaneMain]
	if len(ln.byRun) != 0 || ln.all.front() != nil || len(ln.all.s) != 0 || ln.dead != 0 {
		t.Fatalf("left behind: %d runs, %d entries (head %d), dead %d", len(ln.byRun), len(ln.all.s), ln.all.head, ln.dead)
	}
}

// Pulling one run's call costs the same however many other runs have calls queued (100, 1,000,
// 10,000): go test -bench PullOneRun ./engine/internal/tools/
func BenchmarkPullOneRunAmongMany(b *testing.B) {
	for _, others := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint(others), func(b *testing.B) {
			h := NewHost()
			defer h.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for i := range others {
				go func() { _, _ = h.Call(ctx, LaneMain, Call{RunID: fmt.Sprint("other", i), Tool: "t"}) }()
			}
			for h.Pending() < others {
				time.Sleep(time.Millisecond)
			}
			mine := make(chan struct{})
			go func() {
				defer close(mine)
				for range b.N {
					if _, err := h.Call(ctx, LaneMain, Call{RunID: "mine", Tool: "t"}); err != nil {
						return
					}
				}
			}()
			b.ResetTimer()
			for range b.N {
				got, err := h.Pull(ctx, PullRequest{RunID: "mine", Timeout: time.Second})
				if err != nil || len(got) != 1 {
					b.Fatalf("%v %v", got, err)
				}
				_ = h.Complete(got[0].ID, Result{})
			}
			b.StopTimer()
			<-mine
		})
	}
}

func TestQueuedCountsTheCallsWaitingPerLane(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	answers := enqueueInOrder(t, h, [3]string{LaneMain, "a", "a1"}, [3]string{LaneMain, "b", "b1"}, [3]string{LaneWorker, "a", "a2"})
	if m, w, x := h.Queued(LaneMain), h.Queued(LaneWorker), h.Queued("nope"); m != 2 || w != 1 || x != 0 {
		t.Fatalf("queued main %d worker %d unknown %d, want 2 1 0", m, w, x)
	}
	// A call pulled from the middle leaves the queue (pulled is not queued).
	got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}, RunID: "b", Max: 5})
	if err != nil || len(got) != 1 {
		t.Fatalf("pull b: %+v %v", got, err)
	}
	if m := h.Queued(LaneMain); m != 1 {
		t.Fatalf("queued main after a pull: %d, want 1", m)
	}
	got2, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain, LaneWorker}, Max: 5})
	if err != nil || len(got2) != 2 {
		t.Fatalf("pull all: %+v %v", got2, err)
	}
	if m, w := h.Queued(LaneMain), h.Queued(LaneWorker); m != 0 || w != 0 {
		t.Fatalf("queued after pulling all: main %d worker %d", m, w)
	}
	for _, c := range append(got, got2...) {
		if err := h.Complete(c.ID, Result{Output: c.Tool}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range answers {
		<-ch
	}
}

// An idle host's Pull parks at once rather than yielding maxSpins times: from a host thread
// (a cgo callback locked to its OS thread) each yield is a thread hand-off, and an idle serve's
// 100 ms polls spent 17% of a core on them. Just after an answer it still spins (the next call
// of a sequential run comes within microseconds).
func TestPullSpinsOnlyShortlyAfterAnAnswer(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	for i := 0; i < 3; i++ {
		if got, err := h.Pull(context.Background(), PullRequest{Timeout: 2 * time.Millisecond}); err != nil || len(got) != 0 {
			t.Fatalf("idle pull: %+v %v", got, err)
		}
	}
	if n := h.yields.Load(); n != 0 {
		t.Fatalf("an idle host's Pull yielded %d times; want 0 (park at once)", n)
	}

	answers := enqueueInOrder(t, h, [3]string{LaneMain, "r", "t1"})
	got, err := h.Pull(context.Background(), PullRequest{Max: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("pull: %+v %v", got, err)
	}
	if err := h.Complete(got[0].ID, Result{Output: "ok"}); err != nil {
		t.Fatal(err)
	}
	<-answers[0]
	if !h.answeredWithin(time.Minute) {
		t.Fatal("Complete did not record the time of its answer")
	}
	// As if just answered, however long this goroutine is descheduled before Pull looks: an
	// answer stamped a minute ahead stays within spinWindow for a minute (answeredWithin
	// compares the age, here negative, with the window).
	h.lastAnswer.Store(int64(time.Since(hostEpoch) + time.Minute))
	if got, _ := h.Pull(context.Background(), PullRequest{Timeout: time.Millisecond}); len(got) != 0 {
		t.Fatalf("left over: %+v", got)
	}
	if n := h.yields.Load(); n == 0 {
		t.Fatal("Pull right after an answer did not spin; want it to yield before parking")
	}

	// Once the answer is older than spinWindow the host is idle again (a slow machine only
	// makes it older).
	h.lastAnswer.Store(int64(time.Since(hostEpoch)) | 1)
	time.Sleep(spinWindow + time.Millisecond)
	before := h.yields.Load()
	_, _ = h.Pull(context.Background(), PullRequest{Timeout: time.Millisecond})
	if n := h.yields.Load() - before; n != 0 {
		t.Fatalf("Pull %v after the last answer yielded %d times; want 0", spinWindow, n)
	}
}

// A held host (a closing engine) hands out no call, queued or new, while the calls already
// pulled are still answered; LetGoOf tells when the host lets go of those of the runs asked.
func TestHoldHandsOutNothingButTakesAnswers(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	answers := enqueueInOrder(t, h, [3]string{LaneMain, "a", "a1"}, [3]string{LaneMain, "b", "b1"})
	got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}, Max: 1})
	if err != nil || len(got) != 1 || got[0].Tool != "a1" {
		t.Fatalf("pull: %+v %v", got, err)
	}
	letGo := h.LetGoOf(map[string]bool{"a": true})
	if len(letGo) != 1 || len(h.LetGoOf(map[string]bool{"b": true})) != 0 {
		t.Fatalf("LetGoOf: %d channels for a, want 1 (and none for b, queued only)", len(letGo))
	}
	h.Hold()
	if got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}, Max: 5, Timeout: 20 * time.Millisecond}); err != nil || len(got) != 0 {
		t.Fatalf("a held host handed out %+v %v", got, err)
	}
	if err := h.Complete(got[0].ID, Result{Output: "ok"}); err != nil {
		t.Fatalf("answer of a pulled call to a held host: %v", err)
	}
	select {
	case <-letGo[0]:
	case <-time.After(5 * time.Second):
		t.Fatal("the host answered a1 but LetGoOf's channel stayed open")
	}
	if res := <-answers[0]; res.Output != "ok" {
		t.Fatalf("a1's answer: %+v", res)
	}
}

// A closed gate (an engine whose leases may be lost) hands out no queued call; Reopen wakes a
// waiting puller once the gate is open again, and it gets the call.
func TestGateHoldsQueuedCallsUntilReopened(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	var open atomic.Bool
	h.SetGate(open.Load)
	answers := enqueueInOrder(t, h, [3]string{LaneMain, "a", "a1"})
	if got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}, Max: 5, Timeout: 20 * time.Millisecond}); err != nil || len(got) != 0 {
		t.Fatalf("a closed gate handed out %+v %v", got, err)
	}
	pulled := make(chan []PendingCall, 1)
	go func() {
		got, _ := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}, Max: 1, Timeout: 10 * time.Second})
		pulled <- got
	}()
	select {
	case got := <-pulled:
		t.Fatalf("a closed gate handed out %+v", got)
	case <-time.After(20 * time.Millisecond):
	}
	open.Store(true)
	h.Reopen()
	select {
	case got := <-pulled:
		if len(got) != 1 || got[0].Tool != "a1" {
			t.Fatalf("after Reopen: %+v; want a1", got)
		}
		if err := h.Complete(got[0].ID, Result{Output: "ok"}); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Reopen did not wake the waiting puller")
	}
	if res := <-answers[0]; res.Output != "ok" {
		t.Fatalf("a1's answer: %+v", res)
	}
}

// Only the puller that just answered spins before parking: another puller, idle or woken for a
// call someone else took, parks at once (with 4 serve_tools threads, every queued call woke the
// three idle ones into a spin of thread hand-offs).
func TestPullSpinsOnlyForThePullerThatAnswered(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	p1, _ := h.OpenPuller("one")
	p2, _ := h.OpenPuller("two")
	answers := enqueueInOrder(t, h, [3]string{LaneMain, "r", "t1"})
	got, err := h.Pull(context.Background(), PullRequest{Max: 1, Puller: p1})
	if err != nil || len(got) != 1 {
		t.Fatalf("pull: %+v %v", got, err)
	}
	if err := h.Complete(got[0].ID, Result{Output: "ok"}); err != nil {
		t.Fatal(err)
	}
	<-answers[0]
	before := h.yields.Load()
	if got, _ := h.Pull(context.Background(), PullRequest{Timeout: time.Millisecond, Puller: p2}); len(got) != 0 {
		t.Fatalf("left over: %+v", got)
	}
	if n := h.yields.Load() - before; n != 0 {
		t.Fatalf("a puller that answered nothing yielded %d times; want 0 (park at once)", n)
	}
	// As if p1 had just answered, however long this goroutine is descheduled before it pulls.
	h.mu.Lock()
	h.answeredBy[p1] = int64(time.Since(hostEpoch) + time.Minute)
	h.mu.Unlock()
	if got, _ := h.Pull(context.Background(), PullRequest{Timeout: time.Millisecond, Puller: p1}); len(got) != 0 {
		t.Fatalf("left over: %+v", got)
	}
	if n := h.yields.Load() - before; n == 0 {
		t.Fatal("the puller that just answered did not spin; want it to yield before parking")
	}
	h.ClosePuller(p1)
	h.mu.Lock()
	_, kept := h.answeredBy[p1]
	h.mu.Unlock()
	if kept {
		t.Fatal("a closed puller's answer time is kept")
	}
}

// parkPullers starts n Pulls of req (each with its own result channel) and waits until all n
// are parked on lane (beside those parked before).
func parkPullers(t *testing.T, h *Host, lane string, n int, req PullRequest) []chan []PendingCall {
	t.Helper()
	h.mu.Lock()
	want := n + len(h.lanes[lane].parked)
	h.mu.Unlock()
	out := make([]chan []PendingCall, 0, n)
	for len(out) < n {
		ch := make(chan []PendingCall, 1)
		out = append(out, ch)
		go func() {
			got, _ := h.Pull(context.Background(), req)
			ch <- got
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		parked := len(h.lanes[lane].parked)
		h.mu.Unlock()
		if parked == want {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pullers parked, want %d", parked, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// queueNow queues a call of tool on lane for run runID with h.mu held (as Call does), and
// returns its answer channel.
func queueNow(h *Host, lane, runID, tool string) <-chan answer {
	p := &pending{done: make(chan answer, 1), ctx: context.Background()}
	h.nextID++
	p.call = PendingCall{ID: h.nextID, Lane: lane, Tool: tool, RunID: runID, StepKey: tool}
	h.calls[p.call.ID] = p
	h.queueLocked(h.lanes[lane], p, false)
	return p.done
}

// woken counts the parked pullers of lane woken and not yet searching again, and the parked.
func wokenAndParked(h *Host, lane string) (woken, parked int) {
	ln := h.lanes[lane]
	return ln.searching, len(ln.parked)
}

// A call queued wakes exactly one parked puller (the most recently parked), and a second call
// queued while that one has not looked yet wakes none: it takes both. Before, each call woke
// every parked puller (the lane's wake channel was closed): with 4 serve_tools threads, three
// thread wake-ups per call for nothing.
func TestQueuedCallWakesExactlyOneParkedPuller(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	pulls := parkPullers(t, h, LaneWorker, 3, PullRequest{Lanes: []string{LaneWorker}, Max: 8, Timeout: 30 * time.Second})
	h.mu.Lock()
	queueNow(h, LaneWorker, "r", "a")
	woken1, parked1 := wokenAndParked(h, LaneWorker)
	queueNow(h, LaneWorker, "r", "b")
	woken2, parked2 := wokenAndParked(h, LaneWorker)
	h.mu.Unlock()
	if woken1 != 1 || parked1 != 2 {
		t.Fatalf("after one call: %d woken, %d parked; want 1 and 2", woken1, parked1)
	}
	if woken2 != 1 || parked2 != 2 {
		t.Fatalf("after a second call: %d woken, %d parked; want still 1 and 2 (the woken one takes both)", woken2, parked2)
	}
	// The woken puller takes both; the other two stay parked (their Pulls do not return).
	var got []PendingCall
	select {
	case got = <-pulls[0]:
	case got = <-pulls[1]:
	case got = <-pulls[2]:
	case <-time.After(5 * time.Second):
		t.Fatal("no puller was woken")
	}
	if len(got) != 2 {
		t.Fatalf("the woken puller took %+v; want both calls", got)
	}
	h.mu.Lock()
	woken, parked := wokenAndParked(h, LaneWorker)
	h.mu.Unlock()
	if woken != 0 || parked != 2 {
		t.Fatalf("after the pull: %d searching, %d parked; want 0 and 2", woken, parked)
	}
}

// A woken puller that leaves with calls it could not take still queued (it took its Max) hands
// the wake-up on to the next parked puller, which takes them: no call waits for a puller that
// was never woken.
func TestAWokenPullerThatLeavesCallsHandsTheWakeUpOn(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	pulls := parkPullers(t, h, LaneWorker, 2, PullRequest{Lanes: []string{LaneWorker}, Max: 1, Timeout: 30 * time.Second})
	h.mu.Lock()
	queueNow(h, LaneWorker, "r", "a")
	queueNow(h, LaneWorker, "r", "b") // no wake-up of its own: one puller is woken already
	woken, parked := wokenAndParked(h, LaneWorker)
	h.mu.Unlock()
	if woken != 1 || parked != 1 {
		t.Fatalf("%d woken, %d parked; want 1 and 1", woken, parked)
	}
	var tools []string
	for _, ch := range pulls {
		select {
		case got := <-ch:
			for _, c := range got {
				tools = append(tools, c.Tool)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a puller was not handed the wake-up; pulled so far %v", tools)
		}
	}
	if len(tools) != 2 || tools[0] == tools[1] {
		t.Fatalf("pulled %v; want a and b, one each", tools)
	}
}

// A call of one run wakes a puller parked for that run (or for any run), never one parked for
// another run only, which would find nothing and park again.
func TestQueuedCallWakesAPullerOfItsRun(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	forA := parkPullers(t, h, LaneMain, 1, PullRequest{RunID: "a", Timeout: 30 * time.Second})
	forB := parkPullers(t, h, LaneMain, 2, PullRequest{RunID: "b", Timeout: 30 * time.Second})
	h.mu.Lock()
	queueNow(h, LaneMain, "a", "a1")
	_, parked := wokenAndParked(h, LaneMain)
	h.mu.Unlock()
	if parked != 2 {
		t.Fatalf("%d parked after a call of run a; want 2 (the pullers of run b)", parked)
	}
	select {
	case got := <-forA[0]:
		if len(got) != 1 || got[0].Tool != "a1" {
			t.Fatalf("run a's puller got %+v", got)
		}
	case got := <-forB[0]:
		t.Fatalf("a puller of run b returned %+v", got)
	case got := <-forB[1]:
		t.Fatalf("a puller of run b returned %+v", got)
	case <-time.After(5 * time.Second):
		t.Fatal("run a's puller was not woken")
	}
}

// At most one Pull spins at a time: while another spins, a puller that just answered parks at
// once (each yield of a host thread is a thread hand-off; the spinning one takes what comes).
func TestOnlyOnePullerSpinsAtATime(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	p1, _ := h.OpenPuller("one")
	h.mu.Lock()
	h.answeredBy[p1] = int64(time.Since(hostEpoch) + time.Minute) // as if it had just answered
	h.spinning = 1                                                // as if another puller spun
	h.mu.Unlock()
	if got, _ := h.Pull(context.Background(), PullRequest{Timeout: time.Millisecond, Puller: p1}); len(got) != 0 {
		t.Fatalf("left over: %+v", got)
	}
	if n := h.yields.Load(); n != 0 {
		t.Fatalf("a puller yielded %d times while another spun; want 0 (park at once)", n)
	}
	h.mu.Lock()
	h.spinning = 0
	h.mu.Unlock()
	if got, _ := h.Pull(context.Background(), PullRequest{Timeout: time.Millisecond, Puller: p1}); len(got) != 0 {
		t.Fatalf("left over: %+v", got)
	}
	if n := h.yields.Load(); n == 0 {
		t.Fatal("the only puller that just answered did not spin")
	}
	h.mu.Lock()
	spinning := h.spinning
	h.mu.Unlock()
	if spinning != 0 {
		t.Fatalf("spinning %d after the Pulls returned; want 0", spinning)
	}
}

// While the puller that last took calls of a lane is expected back (its holds are quick), a call
// queued wakes no parked puller at once: the taker will take it, and in Python a second thread
// would only take turns with it at the interpreter lock. A timer wakes a parked puller if the
// call is still queued when the taker is overdue. Slow holds and calls handed back wake one at
// once.
func TestAQuickTakersCallsWakeNobodyUntilItIsOverdue(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	taker, _ := h.OpenPuller("taker")
	idle, _ := h.OpenPuller("idle")
	pulls := parkPullers(t, h, LaneWorker, 1, PullRequest{Lanes: []string{LaneWorker}, Timeout: 30 * time.Second, Puller: idle})
	ln := h.lanes[LaneWorker]

	h.mu.Lock()
	h.lanes[LaneWorker].holdAvg = int64(maxDeferHold + time.Microsecond) // slow holds: no deferral
	ln.lastTake, ln.lastTaker = int64(time.Since(hostEpoch)+time.Minute), taker
	queueNow(h, LaneWorker, "r", "slow")
	_, parked := wokenAndParked(h, LaneWorker)
	h.mu.Unlock()
	if parked != 0 {
		t.Fatal("a call queued while holds are slow did not wake the parked puller at once")
	}
	if got := <-pulls[0]; len(got) != 1 {
		t.Fatalf("the woken puller got %+v", got)
	}

	pulls = parkPullers(t, h, LaneWorker, 1, PullRequest{Lanes: []string{LaneWorker}, Timeout: 30 * time.Second, Puller: idle})
	h.mu.Lock()
	h.lanes[LaneWorker].holdAvg = int64(100 * time.Microsecond)
	// As if the taker had just taken calls, however long this goroutine is descheduled.
	ln.lastTake, ln.lastTaker = int64(time.Since(hostEpoch)+time.Minute), taker
	queueNow(h, LaneWorker, "r", "quick")
	_, parked = wokenAndParked(h, LaneWorker)
	deferred := ln.deferred
	h.mu.Unlock()
	if parked != 1 || !deferred {
		t.Fatalf("a call queued while the quick taker is expected back: %d parked, deferred %v; want 1 and true", parked, deferred)
	}
	select {
	case got := <-pulls[0]:
		t.Fatalf("the parked puller was woken at once and got %+v", got)
	default:
	}
	h.mu.Lock()
	ln.lastTake = 1 // the taker is overdue
	ln.deferTimer.Reset(0)
	h.mu.Unlock()
	select {
	case got := <-pulls[0]:
		if len(got) != 1 || got[0].Tool != "quick" {
			t.Fatalf("woken by the timer, the parked puller got %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the timer did not wake the parked puller for the call still queued")
	}

	// The taker back in Pull is no longer expected: a call then wakes a parked puller at once.
	h.mu.Lock()
	ln.lastTake, ln.lastTaker = int64(time.Since(hostEpoch)+time.Minute), taker
	h.mu.Unlock()
	if got, _ := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneWorker}, Puller: taker}); len(got) != 0 {
		t.Fatalf("left over: %+v", got)
	}
	h.mu.Lock()
	back := ln.lastTake
	h.mu.Unlock()
	if back != 0 {
		t.Fatal("the taker's Pull did not clear lastTake")
	}
}

// A call handed back wakes a parked puller at once, however quick the holds: its puller is busy.
func TestAHandedBackCallWakesAParkedPullerAtOnce(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	taker, _ := h.OpenPuller("taker")
	idle, _ := h.OpenPuller("idle")
	answers := enqueueInOrder(t, h, [3]string{LaneWorker, "r", "w"})
	got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneWorker}, Puller: taker})
	if err != nil || len(got) != 1 {
		t.Fatalf("pull: %+v %v", got, err)
	}
	pulls := parkPullers(t, h, LaneWorker, 1, PullRequest{Lanes: []string{LaneWorker}, Timeout: 30 * time.Second, Puller: idle})
	ln := h.lanes[LaneWorker]
	h.mu.Lock()
	h.lanes[LaneWorker].holdAvg = int64(100 * time.Microsecond)
	ln.lastTake = int64(time.Since(hostEpoch) + time.Minute)
	h.mu.Unlock()
	if n, err := h.Release(taker, []uint64{got[0].ID}); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	select {
	case again := <-pulls[0]:
		if len(again) != 1 || again[0].ID != got[0].ID {
			t.Fatalf("the parked puller got %+v", again)
		}
		_ = h.Complete(again[0].ID, Result{Output: "ok"})
	case <-time.After(5 * time.Second):
		t.Fatal("a call handed back did not wake the parked puller")
	}
	<-answers[0]
}

// The deferral holds only for a call the last taker would take, and by the holds of the call's
// own lane: a call of another run than the taker pulls for wakes a parked puller at once, and
// slow main-lane calls do not stop a quick worker lane's deferral.
func TestADeferralIsForTheTakersRunAndLane(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	taker, _ := h.OpenPuller("taker")
	pulls := parkPullers(t, h, LaneWorker, 1, PullRequest{Lanes: []string{LaneWorker}, Timeout: 30 * time.Second})
	ln := h.lanes[LaneWorker]
	h.mu.Lock()
	h.lanes[LaneMain].holdAvg = int64(time.Second) // slow main-lane calls
	ln.holdAvg = int64(100 * time.Microsecond)
	ln.lastTake, ln.lastTaker, ln.lastTakerRun = int64(time.Since(hostEpoch)+time.Minute), taker, "a"
	queueNow(h, LaneWorker, "a", "a1")
	_, parkedA := wokenAndParked(h, LaneWorker)
	queueNow(h, LaneWorker, "b", "b1")
	_, parkedB := wokenAndParked(h, LaneWorker)
	h.mu.Unlock()
	if parkedA != 1 {
		t.Fatal("a call of the taker's run (its lane's holds quick) woke the parked puller at once")
	}
	if parkedB != 0 {
		t.Fatal("a call of another run than the taker's did not wake the parked puller at once")
	}
	select {
	case got := <-pulls[0]:
		if len(got) != 1 {
			t.Fatalf("the woken puller got %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the woken puller did not return")
	}
}

// A puller that is not the lane's last taker, pulling while that quick taker is due back
// (a serve_tools thread whose wait ended), leaves the queued calls to it: before, it took them
// and two Python threads took turns at the interpreter lock for the rest of the fan-out. Once
// the taker is overdue the other takes them, and the lane's timer hands them on to a parked
// puller; the timer waits again for a taker that took calls since it was armed.
func TestAnotherPullerLeavesQueuedCallsToTheirDueTaker(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	taker, _ := h.OpenPuller("taker")
	idle, _ := h.OpenPuller("idle")
	ln := h.lanes[LaneWorker]
	h.mu.Lock()
	ln.holdAvg = int64(100 * time.Microsecond)
	ln.lastTake, ln.lastTaker = int64(time.Since(hostEpoch)+time.Minute), taker
	queueNow(h, LaneWorker, "r", "q1")
	h.mu.Unlock()
	poll := func(puller uint64) []PendingCall {
		t.Helper()
		got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneWorker}, Puller: puller, Max: 8})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := poll(idle); len(got) != 0 {
		t.Fatalf("another puller took %+v while the taker was due back", got)
	}
	if got := poll(taker); len(got) != 1 || got[0].Tool != "q1" {
		t.Fatalf("the taker got %+v", got)
	}
	h.mu.Lock()
	queueNow(h, LaneWorker, "r", "q2")
	ln.lastTake = 1 // overdue
	h.mu.Unlock()
	if got := poll(idle); len(got) != 1 || got[0].Tool != "q2" {
		t.Fatalf("with the taker overdue, the other puller got %+v", got)
	}

	// Parked: the timer hands the calls on when the taker is overdue, not before.
	pulls := parkPullers(t, h, LaneWorker, 1, PullRequest{Lanes: []string{LaneWorker}, Timeout: 30 * time.Second, Puller: idle})
	h.mu.Lock()
	ln.lastTake, ln.lastTaker = int64(time.Since(hostEpoch)+time.Minute), taker
	queueNow(h, LaneWorker, "r", "q3")
	deferred := ln.deferred
	h.mu.Unlock()
	if !deferred {
		t.Fatal("the call queued for the due taker armed no timer")
	}
	h.mu.Lock()
	ln.deferTimer.Reset(0) // fires while the taker is still due (it took calls since): it waits again
	h.mu.Unlock()
	select {
	case got := <-pulls[0]:
		t.Fatalf("the timer handed on a call of a taker still due: %+v", got)
	case <-time.After(50 * time.Millisecond):
	}
	h.mu.Lock()
	ln.lastTake = 1
	ln.deferTimer.Reset(0)
	h.mu.Unlock()
	select {
	case got := <-pulls[0]:
		if len(got) != 1 || got[0].Tool != "q3" {
			t.Fatalf("woken by the timer, the parked puller got %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the timer did not hand the call of an overdue taker on")
	}
}

// A taker that hands calls back, or closes, is not back soon: the calls queued go to another
// puller at once.
func TestATakerThatHandsBackIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"release", "close"} {
		h := NewHost()
		taker, _ := h.OpenPuller("taker")
		idle, _ := h.OpenPuller("idle")
		enqueueInOrder(t, h, [3]string{LaneWorker, "r", "a"}, [3]string{LaneWorker, "r", "b"})
		got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneWorker}, Puller: taker})
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: pull: %+v %v", how, got, err)
		}
		ln := h.lanes[LaneWorker]
		h.mu.Lock()
		ln.holdAvg = int64(100 * time.Microsecond)
		ln.lastTake = int64(time.Since(hostEpoch) + time.Minute)
		h.mu.Unlock()
		if how == "release" {
			_, err = h.Release(taker, []uint64{got[0].ID})
		} else {
			h.ClosePuller(taker)
		}
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		again, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneWorker}, Puller: idle, Max: 8})
		if err != nil || len(again) != 2 {
			t.Fatalf("%s: the other puller got %+v %v; want both calls", how, again, err)
		}
		h.Close()
	}
}

// A call handed back by another puller is taken at once even while the lane's quick taker is
// due back: its puller was busy, and it must not wait behind the taker (docs/reference/c-abi/calls.md).
func TestAHandedBackCallIsNotLeftToTheTaker(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	taker, _ := h.OpenPuller("taker")
	slow, _ := h.OpenPuller("slow")
	idle, _ := h.OpenPuller("idle")
	enqueueInOrder(t, h, [3]string{LaneWorker, "r", "a"})
	got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneWorker}, Puller: slow})
	if err != nil || len(got) != 1 {
		t.Fatalf("pull: %+v %v", got, err)
	}
	ln := h.lanes[LaneWorker]
	h.mu.Lock()
	ln.holdAvg = int64(100 * time.Microsecond)
	ln.lastTake, ln.lastTaker = int64(time.Since(hostEpoch)+time.Minute), taker
	h.mu.Unlock()
	if _, err := h.Release(slow, []uint64{got[0].ID}); err != nil {
		t.Fatal(err)
	}
	again, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneWorker}, Puller: idle})
	if err != nil || len(again) != 1 || again[0].ID != got[0].ID {
		t.Fatalf("the idle puller got %+v %v; want the call handed back", again, err)
	}
}

// A call queued wakes the lane's last taker first, though another puller parked after it (an
// idle serve_tools thread whose wait ended parks again): its thread ran the lane's calls last,
// and waking another moved the fan-out to a second thread that then shared the GIL with it.
func TestAQueuedCallWakesTheLanesLastTakerFirst(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	taker, _ := h.OpenPuller("taker")
	idle, _ := h.OpenPuller("idle")
	ln := h.lanes[LaneWorker]
	takers := parkPullers(t, h, LaneWorker, 1, PullRequest{Lanes: []string{LaneWorker}, Timeout: 30 * time.Second, Puller: taker})
	idles := parkPullers(t, h, LaneWorker, 1, PullRequest{Lanes: []string{LaneWorker}, Timeout: 30 * time.Second, Puller: idle})
	h.mu.Lock()
	ln.lastTaker = taker // it took calls before, and is back in Pull (lastTake 0: not due)
	queueNow(h, LaneWorker, "r", "a")
	h.mu.Unlock()
	select {
	case got := <-takers[0]:
		if len(got) != 1 {
			t.Fatalf("the taker got %+v", got)
		}
	case got := <-idles[0]:
		t.Fatalf("the puller parked last was woken, not the lane's last taker: %+v", got)
	case <-time.After(5 * time.Second):
		t.Fatal("nobody was woken")
	}
}

// The lane's timer stops when the calls it was armed for were taken: while a fan-out's quick
// taker keeps taking, it does not fire again every window (a thread wake-up each).
func TestTheDeferTimerStopsWhenNothingWaits(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	taker, _ := h.OpenPuller("taker")
	idle, _ := h.OpenPuller("idle")
	ln := h.lanes[LaneWorker]
	h.mu.Lock()
	ln.holdAvg = int64(100 * time.Microsecond)
	ln.lastTake, ln.lastTaker = int64(time.Since(hostEpoch)+time.Minute), taker
	queueNow(h, LaneWorker, "r", "q1")
	h.mu.Unlock()
	if got, _ := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneWorker}, Puller: idle}); len(got) != 0 {
		t.Fatalf("the other puller took %+v", got)
	}
	if got, _ := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneWorker}, Puller: taker}); len(got) != 1 {
		t.Fatalf("the taker got %+v", got)
	}
	h.mu.Lock()
	armed := ln.deferred
	ln.lastTake = int64(time.Since(hostEpoch) + time.Minute) // still due: only an empty lane stops it
	ln.deferTimer.Reset(0)
	h.mu.Unlock()
	if !armed {
		t.Fatal("leaving the call to the taker armed no timer")
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		h.mu.Lock()
		stopped := !ln.deferred
		h.mu.Unlock()
		if stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the timer kept waiting for a taker with no call queued")
		}
	}
}
