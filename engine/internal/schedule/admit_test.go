package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
)

// sharedDB stands for the database that several engines share: the runs every engine started
// (by schedule, until ended) and a lock per schedule (the ScheduleAdmitter of one engine).
type sharedDB struct {
	mu      sync.Mutex
	locks   map[string]*sync.Mutex
	active  map[string]int
	started int
	lockErr error
	meet    *meeting // when set, every Start waits in it (TestSharedAdmissionWithoutAdmitterRaces)
}

// meeting holds each Start of a delivery until the Starts of n engines for it are all inside
// Start, so the engines' admissions of the delivery overlap deterministically: each has looked
// the delivery up in the fire history and found nothing before either records its fire. A
// Start that waits 10 s in vain counts as missed, and later Starts no longer wait.
type meeting struct {
	n      int
	mu     sync.Mutex
	in     map[string]int
	all    map[string]chan struct{}
	missed int
}

func newMeeting(n int) *meeting {
	return &meeting{n: n, in: map[string]int{}, all: map[string]chan struct{}{}}
}

func (m *meeting) wait(key string) {
	m.mu.Lock()
	ch := m.all[key]
	if ch == nil {
		ch = make(chan struct{})
		m.all[key] = ch
	}
	if m.in[key]++; m.in[key] == m.n {
		close(ch)
	}
	failed := m.missed > 0
	m.mu.Unlock()
	if failed { // the test fails anyway: do not wait out a deadline per delivery
		return
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		m.mu.Lock()
		m.missed++
		m.mu.Unlock()
	}
}

func newSharedDB() *sharedDB {
	return &sharedDB{locks: map[string]*sync.Mutex{}, active: map[string]int{}}
}

func (d *sharedDB) LockSchedule(_ context.Context, id string) (func(), error) {
	d.mu.Lock()
	if d.lockErr != nil {
		d.mu.Unlock()
		return nil, d.lockErr
	}
	l := d.locks[id]
	if l == nil {
		l = &sync.Mutex{}
		d.locks[id] = l
	}
	d.mu.Unlock()
	l.Lock()
	return l.Unlock, nil
}

func (d *sharedDB) ActiveScheduleRuns(_ context.Context, id string) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.active[id], nil
}

func (d *sharedDB) end(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.active[id]--
}

// sharedStarter is one engine's Starter on a sharedDB: its Active counts only its own runs, as
// the engine's does; Start takes a few milliseconds, as a write to the database does.
type sharedStarter struct {
	name string
	db   *sharedDB
	mu   sync.Mutex
	own  map[string]int
}

func (s *sharedStarter) Start(_ context.Context, req StartRequest) (string, error) {
	time.Sleep(3 * time.Millisecond)
	s.db.mu.Lock()
	meet := s.db.meet
	s.db.mu.Unlock()
	if meet != nil {
		meet.wait(req.DeliveryID)
	}
	s.db.mu.Lock()
	s.db.started++
	s.db.active[req.ScheduleID]++
	id := fmt.Sprintf("%s-run-%d", s.name, s.db.started)
	s.db.mu.Unlock()
	s.mu.Lock()
	s.own[req.ScheduleID]++
	s.mu.Unlock()
	return id, nil
}

func (s *sharedStarter) Active(_ context.Context, id string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.own[id], nil
}

// twoEngines serves the same webhook schedules from two schedulers sharing one fire history and
// one sharedDB (with WithAdmitter when admit): /hook (max_concurrent 0) and /gated (max 1).
func twoEngines(t *testing.T, admit bool) (*sharedDB, *MemFireLog, []string) {
	t.Helper()
	fires := NewMemFireLog(0)
	db, urls := twoEnginesOn(t, admit, fires)
	return db, fires, urls
}

// twoEnginesOn is twoEngines with the fire history fires.
func twoEnginesOn(t *testing.T, admit bool, fires FireLog) (*sharedDB, []string) {
	t.Helper()
	db := newSharedDB()
	hook := DefaultSpec("hook", "ingest", Trigger{Kind: KindWebhook, Path: "/hook"})
	hook.MaxConcurrent = 0
	gated := DefaultSpec("gated", "ingest", Trigger{Kind: KindWebhook, Path: "/gated"})
	gated.MaxConcurrent = 1
	var urls []string
	for _, name := range []string{"a", "b"} {
		var opts []Option
		if admit {
			opts = append(opts, WithAdmitter(db))
		}
		s, err := New(Config{Schedules: []Spec{hook, gated}}, &sharedStarter{name: name, db: db, own: map[string]int{}}, fires, opts...)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL)
	}
	return db, urls
}

func post(t *testing.T, url, delivery string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{}`))
	if delivery != "" {
		req.Header.Set(DeliveryHeader, delivery)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer res.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(res.Body).Decode(&body)
	return res.StatusCode, body
}

// The same delivery sent to two engines at once starts one run: the other engine answers as for
// a redelivery (200, duplicate, the first run's id). Without the shared lock both engines find no
// fire of the delivery in the history and start a run each.
func TestSharedAdmissionSameDeliveryOnTwoEngines(t *testing.T) {
	t.Parallel()
	db, fires, urls := twoEngines(t, true)
	const deliveries = 20
	for i := range deliveries {
		var wg sync.WaitGroup
		codes, bodies := make([]int, 2), make([]map[string]any, 2)
		for k, u := range urls {
			wg.Go(func() { codes[k], bodies[k] = post(t, u+"/hook", fmt.Sprintf("d-%d", i)) })
		}
		wg.Wait()
		first, dup := 0, 1
		if codes[0] != 202 {
			first, dup = 1, 0
		}
		if codes[first] != 202 || codes[dup] != 200 || bodies[dup]["duplicate"] != true ||
			bodies[dup]["run_id"] != bodies[first]["run_id"] || bodies[dup]["status"] != "enqueued" {
			t.Fatalf("delivery %d: %d %v and %d %v; want one 202 and one 200 duplicate of its run", i, codes[0], bodies[0], codes[1], bodies[1])
		}
	}
	if db.started != deliveries {
		t.Fatalf("%d runs started for %d deliveries", db.started, deliveries)
	}
	if fs, _ := fires.Fires(context.Background(), "hook", 0); len(fs) != deliveries {
		t.Fatalf("%d fires recorded; want one per delivery", len(fs))
	}
}

// Without the shared lock the race is real: the control of the test above (it tests the lock).
// The two engines' Starts of each delivery wait for each other (a meeting in the test's
// Starter), so both requests are inside Start at once, each past its look-up of the delivery in
// the shared fire history, however the machine schedules them: without the admitter nothing
// orders them, so each starts a run. (With it, the second waits for the schedule's lock
// the first holds through Start, and the meeting is missed.)
func TestSharedAdmissionWithoutAdmitterRaces(t *testing.T) {
	t.Parallel()
	db, _, urls := twoEngines(t, false)
	meet := newMeeting(len(urls))
	db.mu.Lock()
	db.meet = meet
	db.mu.Unlock()
	const deliveries = 20
	for i := range deliveries {
		var wg sync.WaitGroup
		for _, u := range urls {
			wg.Go(func() { post(t, u+"/hook", fmt.Sprintf("d-%d", i)) })
		}
		wg.Wait()
	}
	meet.mu.Lock()
	missed := meet.missed
	meet.mu.Unlock()
	db.mu.Lock()
	started := db.started
	db.mu.Unlock()
	if missed != 0 || started != 2*deliveries {
		t.Fatalf("%d runs for %d deliveries sent to two engines at once without the admitter, %d Starts never met the other engine's: "+
			"the two engines were not inside Start together, so the test no longer races them and TestSharedAdmissionSameDeliveryOnTwoEngines proves nothing",
			started, deliveries, missed)
	}
}

// max_concurrent counts the runs of every engine (the admitter's count, not Starter.Active's):
// a run started by engine a makes engine b skip, 429 with in_flight, recorded skipped.
func TestSharedAdmissionMaxConcurrentAcrossEngines(t *testing.T) {
	t.Parallel()
	db, fires, urls := twoEngines(t, true)
	var wg sync.WaitGroup
	codes := make([]int, 2)
	bodies := make([]map[string]any, 2)
	for k, u := range urls {
		wg.Go(func() { codes[k], bodies[k] = post(t, u+"/gated", "") })
	}
	wg.Wait()
	if codes[0]+codes[1] != 202+429 {
		t.Fatalf("two fires at once on two engines: %d %v, %d %v; want one 202 and one 429", codes[0], bodies[0], codes[1], bodies[1])
	}
	skipped := bodies[0]
	if codes[1] == 429 {
		skipped = bodies[1]
	}
	if skipped["error"] != WebhookMaxConcurrent || skipped["in_flight"] != 1.0 || skipped["max"] != 1.0 {
		t.Fatalf("skipped: %v", skipped)
	}
	fs, _ := fires.Fires(context.Background(), "gated", 0)
	if len(fs) != 2 || fs[0].Kind != FireSkipped || fs[0].Reason != ReasonMaxConcurrent || fs[1].Kind != FireFired {
		t.Fatalf("history %+v", fs)
	}
	db.end("gated")
	if code, body := post(t, urls[1]+"/gated", ""); code != 202 {
		t.Fatalf("after the run ended: %d %v", code, body)
	}
}

// A lock that cannot be taken fails the fire (500 start_failed, recorded failed with reason
// status_failed), and does not make the delivery a duplicate: its retry starts the run.
func TestSharedAdmissionLockFailure(t *testing.T) {
	t.Parallel()
	db, fires, urls := twoEngines(t, true)
	db.mu.Lock()
	db.lockErr = errors.New("the database is away")
	db.mu.Unlock()
	code, body := post(t, urls[0]+"/hook", "d-1")
	if code != 500 || body["error"] != WebhookStartFailed || !strings.Contains(fmt.Sprint(body["message"]), "the database is away") {
		t.Fatalf("%d %v", code, body)
	}
	fs, _ := fires.Fires(context.Background(), "hook", 0)
	if len(fs) != 1 || fs[0].Kind != FireFailed || fs[0].Reason != ReasonStatusFailed {
		t.Fatalf("history %+v", fs)
	}
	db.mu.Lock()
	db.lockErr = nil
	db.mu.Unlock()
	if code, body := post(t, urls[1]+"/hook", "d-1"); code != 202 {
		t.Fatalf("retry on the other engine: %d %v", code, body)
	}
}

// countingAdmitter is a sharedDB that records which schedules were locked.
type countingAdmitter struct {
	*sharedDB
	mu     sync.Mutex
	locked []string
}

func (c *countingAdmitter) LockSchedule(ctx context.Context, id string) (func(), error) {
	c.mu.Lock()
	c.locked = append(c.locked, id)
	c.mu.Unlock()
	return c.sharedDB.LockSchedule(ctx, id)
}

// A cron fire of a max_concurrent schedule counts the runs of every engine under the lock: a
// run another engine started makes it skip, though this engine's Starter.Active counts none; a
// schedule without max_concurrent takes no lock.
func TestSharedAdmissionCronFire(t *testing.T) {
	t.Parallel()
	limited := DefaultSpec("limited", "wf", Trigger{Kind: KindCron, Expression: "0 * * * * *"})
	limited.MaxConcurrent = 1
	free := DefaultSpec("free", "wf", Trigger{Kind: KindCron, Expression: "30 * * * * *"})
	free.MaxConcurrent = 0
	a := &countingAdmitter{sharedDB: newSharedDB()}
	a.active["limited"] = 1 // a run of another engine
	b := setup(t, t0, Config{Schedules: []Spec{limited}}, WithAdmitter(a))
	b.start(t)
	b.fireNext(t, "limited")
	a.end("limited")
	b.fireNext(t, "limited")
	h := b.history(t, "limited") // oldest first
	if len(h) != 2 || h[0].Kind != FireSkipped || h[0].Reason != ReasonMaxConcurrent ||
		h[0].Message != "1 runs active; max_concurrent is 1" || h[1].Kind != FireFired {
		t.Fatalf("history of limited %+v", h)
	}
	b.starter.mu.Lock()
	calls := b.starter.activeCalls
	b.starter.mu.Unlock()
	if calls != 0 {
		t.Fatalf("Starter.Active called %d times; the admitter counts", calls)
	}
	f := setup(t, t0, Config{Schedules: []Spec{free}}, WithAdmitter(a))
	f.start(t)
	f.fireNext(t, "free")
	if h := f.history(t, "free"); len(h) != 1 || h[0].Kind != FireFired {
		t.Fatalf("history of free %+v", h)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if strings.Join(a.locked, " ") != "limited limited" {
		t.Fatalf("locked %v; want limited twice, free never", a.locked)
	}
}

// slowLock is an admitter whose lock takes a minute to get (another engine held it): it moves
// the stub clock on.
type slowLock struct {
	*sharedDB
	clk *clock.Stub
}

func (l *slowLock) LockSchedule(ctx context.Context, id string) (func(), error) {
	l.clk.Advance(time.Minute)
	return l.sharedDB.LockSchedule(ctx, id)
}

// A webhook fire's fired_at is when it was admitted, after the wait for the shared lock.
func TestSharedAdmissionFiredAtAfterTheLock(t *testing.T) {
	t.Parallel()
	l := &slowLock{sharedDB: newSharedDB()}
	w := setupWebhooks(t, Config{}, nil, WithAdmitter(l))
	l.clk = w.clock
	received := w.clock.Now()
	if r := w.do(t, "POST", "/hooks/open", map[string]string{DeliveryHeader: "d-1"}, []byte(`{}`)); r.status != 202 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	h := w.history(t, "open")
	want := received.Add(time.Minute)
	if len(h) != 1 || !h[0].FiredAt.Equal(want) || w.starter.requests()[0].Trigger["fired_at"] != rfc3339(want) {
		t.Fatalf("history %+v, trigger %v; want fired at %s", h, w.starter.requests()[0].Trigger, want)
	}
}

// replayFireLog is the fire history of a shared database: a MemFireLog that also keeps each
// fire's replay key (a ReplayFinder, as the PostgreSQL store is).
type replayFireLog struct {
	*MemFireLog
	mu   sync.Mutex
	keys map[string]Fire // schedule id + " " + key → latest fired entry
	err  error           // FireByReplay's error, when set
}

func (l *replayFireLog) RecordFire(ctx context.Context, f Fire) error {
	if f.Kind == FireFired && f.ReplayKey != "" {
		l.mu.Lock()
		l.keys[f.ScheduleID+" "+f.ReplayKey] = f
		l.mu.Unlock()
	}
	return l.MemFireLog.RecordFire(ctx, f)
}

func (l *replayFireLog) FireByReplay(_ context.Context, id, key string) (Fire, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return Fire{}, false, l.err
	}
	f, ok := l.keys[id+" "+key]
	return f, ok, nil
}

// twoStampedEngines serves the schedule /stamped (signature: timestamped, tolerance_secs 60,
// max_concurrent 0) from two schedulers on one stub clock that share a replayFireLog and a
// sharedDB admitter.
func twoStampedEngines(t *testing.T) (*sharedDB, *replayFireLog, *clock.Stub, []string) {
	t.Helper()
	db, fires := newSharedDB(), &replayFireLog{MemFireLog: NewMemFireLog(0), keys: map[string]Fire{}}
	clk := clock.NewStub(time.Date(2026, 4, 1, 12, 0, 0, 0, time.UTC))
	sp := DefaultSpec("stamped", "ingest", Trigger{Kind: KindWebhook, Path: "/stamped", SecretEnv: "SIGNED_SECRET",
		Signature: SignatureTimestamped, ToleranceSecs: 60})
	sp.MaxConcurrent = 0
	env := func(k string) (string, bool) { return testSecret, k == "SIGNED_SECRET" }
	var urls []string
	for _, name := range []string{"a", "b"} {
		s, err := New(Config{Schedules: []Spec{sp}, LookupEnv: env}, &sharedStarter{name: name, db: db, own: map[string]int{}}, fires,
			WithClock(clk), WithAdmitter(db))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		urls = append(urls, srv.URL+"/stamped")
	}
	return db, fires, clk, urls
}

// postStamped sends body signed with sig and the delivery id (none when "").
func postStamped(t *testing.T, url, sig, delivery string, body []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(string(body)))
	req.Header.Set(TimestampedSignatureHeader, sig)
	if delivery != "" {
		req.Header.Set(DeliveryHeader, delivery)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

// A signed request captured and replayed to the other engine, with a new delivery id or none,
// is answered as a duplicate of the first run, as on one engine: the other engine finds the
// signature in the shared history. Each engine's in-memory guard alone let it start a second
// run. Sent to both engines at once (different delivery ids), it starts one run. Once outside
// the window it is refused as expired on both.
func TestSharedAdmissionTimestampedReplayOnTwoEngines(t *testing.T) {
	t.Parallel()
	db, fires, clk, urls := twoStampedEngines(t)
	body := []byte(`{"file": "/in/a.ma"}`)
	sig := stamp(clk.Now().Unix(), body)
	code, first := postStamped(t, urls[0], sig, "d-1", body)
	if code != 202 {
		t.Fatalf("first request to a: %d %v", code, first)
	}
	for _, delivery := range []string{"d-2", ""} {
		code, r := postStamped(t, urls[1], sig, delivery, body)
		if code != 200 || r["duplicate"] != true || r["run_id"] != first["run_id"] || r["status"] != "enqueued" ||
			r["schedule_id"] != "stamped" || r["workflow"] != "ingest" {
			t.Fatalf("the replay to b with delivery id %q: %d %v; want 200 duplicate of %v", delivery, code, r, first["run_id"])
		}
	}
	const requests = 20
	for i := range requests {
		clk.Advance(time.Second)
		sig := stamp(clk.Now().Unix(), body)
		var wg sync.WaitGroup
		codes, bodies := make([]int, 2), make([]map[string]any, 2)
		for k, u := range urls {
			wg.Go(func() { codes[k], bodies[k] = postStamped(t, u, sig, fmt.Sprintf("c-%d-%d", i, k), body) })
		}
		wg.Wait()
		first, dup := 0, 1
		if codes[0] != 202 {
			first, dup = 1, 0
		}
		if codes[first] != 202 || codes[dup] != 200 || bodies[dup]["duplicate"] != true || bodies[dup]["run_id"] != bodies[first]["run_id"] {
			t.Fatalf("request %d sent to both engines: %d %v and %d %v; want one 202 and one 200 duplicate of its run", i, codes[0], bodies[0], codes[1], bodies[1])
		}
	}
	if db.started != 1+requests {
		t.Fatalf("%d runs started for %d signed requests", db.started, 1+requests)
	}
	clk.Advance(61 * time.Second) // the last signature is now 61 s old; tolerance_secs is 60
	last := stamp(clk.Now().Add(-61*time.Second).Unix(), body)
	for _, u := range urls {
		if code, r := postStamped(t, u, last, "late", body); code != 401 || r["error"] != WebhookSignatureExpired {
			t.Fatalf("the replay after the window to %s: %d %v; want 401 signature_expired", u, code, r)
		}
	}
	if fs, _ := fires.Fires(context.Background(), "stamped", 0); len(fs) != 1+requests || db.started != 1+requests {
		t.Fatalf("%d fires, %d runs; want %d each (a replay is no fire)", len(fs), db.started, 1+requests)
	}
}

// A signature that cannot be looked up in the shared history is refused (500 start_failed,
// recorded failed status_failed), not let through as new: the replay guard fails closed. Once
// the history answers, the replay is a duplicate of the first run.
func TestSharedAdmissionTimestampedLookupFailure(t *testing.T) {
	t.Parallel()
	db, fires, clk, urls := twoStampedEngines(t)
	body := []byte(`{}`)
	sig := stamp(clk.Now().Unix(), body)
	code, first := postStamped(t, urls[0], sig, "", body)
	if code != 202 {
		t.Fatalf("first: %d %v", code, first)
	}
	fires.mu.Lock()
	fires.err = errors.New("the database is away")
	fires.mu.Unlock()
	code, r := postStamped(t, urls[1], sig, "", body)
	if code != 500 || r["error"] != WebhookStartFailed || !strings.Contains(fmt.Sprint(r["message"]), "the database is away") {
		t.Fatalf("the replay while the history fails: %d %v; want 500 start_failed", code, r)
	}
	if fs, _ := fires.Fires(context.Background(), "stamped", 1); len(fs) != 1 || fs[0].Kind != FireFailed || fs[0].Reason != ReasonStatusFailed {
		t.Fatalf("history %+v", fs)
	}
	fires.mu.Lock()
	fires.err = nil
	fires.mu.Unlock()
	if code, r := postStamped(t, urls[1], sig, "", body); code != 200 || r["duplicate"] != true || r["run_id"] != first["run_id"] {
		t.Fatalf("the replay once the history answers: %d %v", code, r)
	}
	if db.started != 1 {
		t.Fatalf("%d runs started; want 1", db.started)
	}
}

// failingDeliveries is a MemFireLog whose FireByDelivery fails while err is set.
type failingDeliveries struct {
	*MemFireLog
	mu  sync.Mutex
	err error
}

func (l *failingDeliveries) FireByDelivery(ctx context.Context, id, delivery string) (Fire, bool, error) {
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err != nil {
		return Fire{}, false, err
	}
	return l.MemFireLog.FireByDelivery(ctx, id, delivery)
}

func (l *failingDeliveries) fail(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
}

// On a shared database a delivery id that cannot be looked up in the history is refused (500
// start_failed, recorded failed status_failed), not let through as new: the redelivery guard
// fails closed, as the replay guard does, since the history is the only record of what the other
// engines ran. Once the history answers, the redelivery is a duplicate of the first run.
func TestSharedAdmissionDeliveryLookupFailure(t *testing.T) {
	t.Parallel()
	fires := &failingDeliveries{MemFireLog: NewMemFireLog(0)}
	db, urls := twoEnginesOn(t, true, fires)
	code, first := post(t, urls[0]+"/hook", "d-1")
	if code != 202 {
		t.Fatalf("first: %d %v", code, first)
	}
	fires.fail(errors.New("the database is away"))
	code, r := post(t, urls[1]+"/hook", "d-1")
	if msg := fmt.Sprint(r["message"]); code != 500 || r["error"] != WebhookStartFailed ||
		!strings.Contains(msg, "delivery id") || !strings.Contains(msg, "the database is away") {
		t.Fatalf("the redelivery to b while the history fails: %d %v; want 500 start_failed naming the delivery lookup", code, r)
	}
	fs, _ := fires.Fires(context.Background(), "hook", 0)
	if len(fs) != 2 || fs[0].Kind != FireFailed || fs[0].Reason != ReasonStatusFailed || fs[0].DeliveryID != "d-1" ||
		!strings.Contains(fs[0].Message, "delivery id") {
		t.Fatalf("history %+v; want the refused redelivery recorded failed status_failed", fs)
	}
	fires.fail(nil)
	if code, r := post(t, urls[1]+"/hook", "d-1"); code != 200 || r["duplicate"] != true || r["run_id"] != first["run_id"] {
		t.Fatalf("the redelivery once the history answers: %d %v; want 200 duplicate of %v", code, r, first["run_id"])
	}
	if db.started != 1 {
		t.Fatalf("%d runs started for one delivery; want 1", db.started)
	}
}

// Without an admitter (SQLite, memory: one engine serves the schedule) a delivery id whose lookup
// in the history fails is let through (logged): the engine's own window, checked first, holds
// the deliveries it ran recently, so a redelivery to it is still a duplicate.
func TestDeliveryLookupFailureWithoutAdmitter(t *testing.T) {
	t.Parallel()
	fires := &failingDeliveries{MemFireLog: NewMemFireLog(0)}
	fires.fail(errors.New("the file is away"))
	w := setupWebhooks(t, Config{}, fires)
	hdr := map[string]string{DeliveryHeader: "d-1"}
	if r := w.do(t, "POST", "/hooks/open", hdr, []byte(`{}`)); r.status != 202 {
		t.Fatalf("a new delivery while the history fails: %d %s; want 202", r.status, r.raw)
	}
	if r := w.do(t, "POST", "/hooks/open", hdr, []byte(`{}`)); r.status != 200 || r.body["duplicate"] != true || r.body["run_id"] != "run-1" {
		t.Fatalf("its redelivery: %d %s; want 200 duplicate of run-1", r.status, r.raw)
	}
	if n := len(w.starter.requests()); n != 1 {
		t.Fatalf("%d runs started; want 1", n)
	}
}
