package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Resource URIs.
const (
	catalogURI   = "dccflow://catalog"
	runURIPrefix = "dccflow://runs/" // + workflow_id
)

// DefaultUpdateInterval is the coalescing window of notifications/resources/updated: a session
// gets at most one per subscribed resource per interval.
const DefaultUpdateInterval = 100 * time.Millisecond

// maxSendRetries bounds how often a notification that found the session's queue full is
// retried (one interval apart) before it is dropped.
const maxSendRetries = 20

// subscriptions implements resources/subscribe for run resources. mcp-go v1.2.1 answers
// resources/subscribe and resources/unsubscribe itself and reports them to hooks; the
// transports' sessions keep no subscription state, so it is kept here, per session id:
//
//   - check (an OnRequestInitialization hook) refuses a subscription to anything but an
//     existing run, before mcp-go acknowledges it;
//   - add and remove (AfterSubscribe / AfterUnsubscribe hooks, which run before the response
//     is written) keep the watches;
//   - OnRegisterSession / OnUnregisterSession keep the set of live sessions: dropSession
//     forgets a closed session's watches, and add ignores a session that is no longer live
//     (a subscribe racing with the session's end leaves nothing behind).
//
// While at least one watch exists, one goroutine reads the engine's event stream and touches
// the watches of each event's run. A watch sends notifications/resources/updated at once when
// its last one is at least interval old, else once, interval after the last one (leading and
// trailing edge): bursts cost one notification per interval, and the last notification always
// follows the last event, so a client never misses a run's terminal status. A subscription to
// a run that is already terminal is followed by one notification, so "wait for an update, then
// read" works whatever the order of the client's subscribe and the run's end.
type subscriptions struct {
	e        *engine.Engine
	clock    clock.Clock
	interval time.Duration // ≤ 0: one notification per event
	// send delivers a notification to a session (SendNotificationToSpecificClient).
	send func(sessionID, method string, params map[string]any) error

	mu       sync.Mutex
	live     map[string]bool              // registered session ids
	sessions map[string]map[string]*watch // session id → run URI → watch
	runs     map[string]map[string]*watch // run id → session id → watch
	stop     context.CancelFunc           // ends the event reader; nil when none runs
	done     chan struct{}                // closed when the latest event reader has returned
	// sent, when set (tests), is called for every notification delivered, with the sequence
	// number of the newest event of the run seen when it was sent.
	sent func(sessionID, uri string, seq uint64)
}

// watch is one session's subscription to one run resource.
type watch struct {
	session, uri, runID string
	last                time.Time   // when the last notification went out; zero: never
	seq                 uint64      // newest event of the run seen
	timer               clock.Timer // the pending trailing (or retried) notification, or nil
	retries             int
}

func newSubscriptions(e *engine.Engine) *subscriptions {
	done := make(chan struct{})
	close(done)
	return &subscriptions{e: e, clock: clock.New(), interval: DefaultUpdateInterval,
		live: map[string]bool{}, sessions: map[string]map[string]*watch{}, runs: map[string]map[string]*watch{}, done: done}
}

// hooks wires the subscriptions into mcp-go's request flow.
func (s *subscriptions) hooks() *server.Hooks {
	h := &server.Hooks{}
	h.AddOnRequestInitialization(s.check)
	h.AddAfterSubscribe(func(ctx context.Context, _ any, req *mcp.SubscribeRequest, _ *mcp.EmptyResult) {
		if session := server.ClientSessionFromContext(ctx); session != nil {
			s.add(ctx, session.SessionID(), req.Params.URI)
		}
	})
	h.AddAfterUnsubscribe(func(ctx context.Context, _ any, req *mcp.UnsubscribeRequest, _ *mcp.EmptyResult) {
		if session := server.ClientSessionFromContext(ctx); session != nil {
			s.remove(session.SessionID(), req.Params.URI)
		}
	})
	h.AddOnRegisterSession(func(_ context.Context, session server.ClientSession) {
		s.openSession(session.SessionID())
	})
	h.AddOnUnregisterSession(func(_ context.Context, session server.ClientSession) {
		s.dropSession(session.SessionID())
	})
	return h
}

// check refuses, before mcp-go acknowledges it, a resources/subscribe to anything but an
// existing run resource, and resource subscriptions through subscriptions/listen (protocol
// 2026-07-28), which the transports' sessions cannot track. mcp-go turns the error into a
// JSON-RPC error with code -32600 (invalid request) and this message, which names the URI.
func (s *subscriptions) check(ctx context.Context, _ any, message any) error {
	raw, ok := message.(json.RawMessage)
	if !ok || !bytes.Contains(raw, []byte(`subscri`)) { // cheap: most messages are not about subscriptions
		return nil
	}
	var m struct {
		Method string `json:"method"`
		Params struct {
			URI           string `json:"uri"`
			Notifications struct {
				ResourceSubscriptions []string `json:"resourceSubscriptions"`
			} `json:"notifications"`
		} `json:"params"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return nil // mcp-go reports the malformed request
	}
	switch mcp.MCPMethod(m.Method) {
	case mcp.MethodResourcesSubscribe:
		if m.Params.URI == "" {
			return nil // mcp-go: "uri is required" (invalid params)
		}
		if _, err := s.runOf(ctx, m.Params.URI); err != nil {
			return err
		}
		// Without a session (HandleMessage called directly) the subscribe is acknowledged and
		// tracks nothing; a session the transport has not registered could never be notified.
		if session := server.ClientSessionFromContext(ctx); session != nil && !s.isLive(session.SessionID()) {
			return fmt.Errorf("cannot subscribe to %s: session %q is not open (initialize first)", m.Params.URI, session.SessionID())
		}
	case mcp.MethodSubscriptionsListen:
		if len(m.Params.Notifications.ResourceSubscriptions) > 0 {
			return errors.New("resource subscriptions through subscriptions/listen are not supported; use resources/subscribe (protocol 2025-11-25 or earlier)")
		}
	}
	return nil
}

// runOf returns the run id of a subscribable resource URI: an existing run's.
func (s *subscriptions) runOf(ctx context.Context, uri string) (string, error) {
	id, ok := strings.CutPrefix(uri, runURIPrefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		if uri == catalogURI {
			return "", fmt.Errorf("resource %s cannot be subscribed to: only run resources (%s{workflow_id}) send updates", uri, runURIPrefix)
		}
		return "", fmt.Errorf("resource not found: %s (subscribable resources are runs, %s{workflow_id})", uri, runURIPrefix)
	}
	if _, err := s.e.Status(ctx, id); err != nil {
		if run.CodeOf(err) == run.CodeNotFound {
			return "", runNotFound(uri, id)
		}
		return "", fmt.Errorf("subscribing to %s: %w", uri, err)
	}
	return id, nil
}

// runNotFound is the error for a run resource whose run does not exist (read or subscribe).
func runNotFound(uri, id string) error {
	return fmt.Errorf("resource not found: %s (no run %s)", uri, id)
}

// add records that session watches uri (a run URI check accepted); a session that is not
// live (never registered, or already closed) is ignored. Subscribing twice keeps one watch.
// The first watch starts the event reader at the engine's next event.
//
// Then, when the run is already terminal, the watch is touched as by an event: one
// notification (coalesced with any other due). The status is read after the watch exists and
// the reader's start is fixed, so a run that ends at any moment around the subscribe is
// either seen terminal here or seen ending by the reader: its final notification is never lost.
func (s *subscriptions) add(ctx context.Context, sessionID, uri string) {
	id, ok := strings.CutPrefix(uri, runURIPrefix)
	if !ok || id == "" {
		return
	}
	s.mu.Lock()
	if !s.live[sessionID] {
		s.mu.Unlock()
		return
	}
	w, ok := s.sessions[sessionID][uri]
	if !ok {
		w = &watch{session: sessionID, uri: uri, runID: id}
		if s.sessions[sessionID] == nil {
			s.sessions[sessionID] = map[string]*watch{}
		}
		s.sessions[sessionID][uri] = w
		if s.runs[id] == nil {
			s.runs[id] = map[string]*watch{}
		}
		s.runs[id][sessionID] = w
		if s.stop == nil {
			s.startReader()
		}
	}
	s.mu.Unlock()

	if info, err := s.e.Status(ctx, id); err != nil || !info.Terminal {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[sessionID][uri] == w { // not unsubscribed meanwhile
		s.due(w)
	}
}

// remove ends session's watch of uri; unknown watches are ignored.
func (s *subscriptions) remove(sessionID, uri string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.sessions[sessionID][uri]; ok {
		s.forget(w)
	}
	s.stopIfIdle()
}

// openSession records that a session is live: it may subscribe.
func (s *subscriptions) openSession(sessionID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live[sessionID] = true
}

// isLive reports whether a session is registered.
func (s *subscriptions) isLive(sessionID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[sessionID]
}

// dropSession ends every watch of a closed session.
func (s *subscriptions) dropSession(sessionID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, sessionID)
	for _, w := range s.sessions[sessionID] {
		s.forget(w)
	}
	s.stopIfIdle()
}

// forget removes w from both indexes and stops its timer. The caller holds mu.
func (s *subscriptions) forget(w *watch) {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	delete(s.sessions[w.session], w.uri)
	if len(s.sessions[w.session]) == 0 {
		delete(s.sessions, w.session)
	}
	delete(s.runs[w.runID], w.session)
	if len(s.runs[w.runID]) == 0 {
		delete(s.runs, w.runID)
	}
}

// startReader starts the event reader at the engine's next event. The caller holds mu.
func (s *subscriptions) startReader() {
	from, err := s.e.LastSeq(context.Background())
	if err != nil {
		return // the engine is closed: nothing will happen to its runs
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.stop, s.done = cancel, done
	go s.read(ctx, from+1, done)
}

// stopIfIdle stops the event reader once nothing is watched. The caller holds mu.
func (s *subscriptions) stopIfIdle() {
	if len(s.sessions) == 0 && s.stop != nil {
		s.stop()
		s.stop = nil
	}
}

// read delivers the engine's events from seq from to the watches until ctx ends or the engine
// closes. A failed read is retried a second later.
func (s *subscriptions) read(ctx context.Context, from uint64, done chan struct{}) {
	defer close(done)
	defer func() {
		s.mu.Lock()
		if s.done == done && s.stop != nil { // the engine closed under a live reader
			s.stop()
			s.stop = nil
		}
		s.mu.Unlock()
	}()
	sub, err := s.e.Subscribe(ctx, engine.EventQuery{FromSeq: from})
	if err != nil {
		return
	}
	defer sub.Close()
	for {
		ev, err := sub.Next(ctx)
		switch {
		case err == nil:
			s.event(ctx, ev)
		case ctx.Err() != nil || run.CodeOf(err) == run.CodeClosed:
			return
		default:
			if clock.Sleep(ctx, s.clock, time.Second) != nil {
				return
			}
		}
	}
}

// event touches the watches of ev's run.
func (s *subscriptions) event(ctx context.Context, ev run.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ctx.Err() != nil { // a reader being stopped: a newer one may deliver this event too
		return
	}
	for _, w := range s.runs[ev.RunID] {
		w.seq = ev.Seq
		s.due(w)
	}
}

// due makes a notification due for w: at once when the last one is at least an interval old
// (or none went out yet), else an interval after the last one. A notification already pending
// covers this one. The caller holds mu.
func (s *subscriptions) due(w *watch) {
	if w.timer != nil {
		return
	}
	now := s.clock.Now()
	if !w.last.IsZero() {
		if wait := w.last.Add(s.interval).Sub(now); wait > 0 {
			s.schedule(w, wait)
			return
		}
	}
	s.notify(w, now)
}

// schedule sends w's notification after d. The caller holds mu.
func (s *subscriptions) schedule(w *watch, d time.Duration) {
	w.timer = s.clock.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.sessions[w.session][w.uri] != w { // unsubscribed meanwhile
			return
		}
		w.timer = nil
		s.notify(w, s.clock.Now())
	})
}

// notify sends notifications/resources/updated for w now. Sending never blocks: when the
// session's queue is full it is retried an interval later, up to maxSendRetries times; a
// session that is gone gets nothing. The caller holds mu, so no notification starts after an
// unsubscribe was answered.
func (s *subscriptions) notify(w *watch, now time.Time) {
	err := s.send(w.session, string(mcp.MethodNotificationResourceUpdated), map[string]any{"uri": w.uri})
	switch {
	case err == nil:
		w.last, w.retries = now, 0
		if s.sent != nil {
			s.sent(w.session, w.uri, w.seq)
		}
	case errors.Is(err, server.ErrNotificationChannelBlocked) && w.retries < maxSendRetries:
		w.retries++
		s.schedule(w, max(s.interval, 10*time.Millisecond))
	default:
		w.retries = 0
	}
}

// stats reports the tracked sessions and watches and whether the event reader runs (tests).
func (s *subscriptions) stats() (sessions, watches int, reading bool, done <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ws := range s.sessions {
		watches += len(ws)
	}
	return len(s.sessions), watches, s.stop != nil, s.done
}
