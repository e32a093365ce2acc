package schedule

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Webhook error codes: the "error" field of a JSON error body.
const (
	WebhookUnknown          = "unknown_webhook"          // 404
	WebhookMethodNotAllowed = "method_not_allowed"       // 405
	WebhookSecretMissing    = "webhook_secret_missing"   // 500
	WebhookPayloadTooLarge  = "payload_too_large"        // 413
	WebhookInvalidBody      = "invalid_body"             // 400: the body could not be read
	WebhookInvalidSignature = "invalid_signature"        // 401
	WebhookSignatureExpired = "signature_expired"        // 401: signature: timestamped, t outside tolerance_secs
	WebhookUnsignedRefused  = "unsigned_webhook_refused" // 403: no secret_env, a non-loopback request
	WebhookInvalidJSON      = "invalid_json"             // 400
	WebhookInvalidDelivery  = "invalid_delivery_id"      // 400
	WebhookMaxConcurrent    = "max_concurrent_exceeded"  // 429
	WebhookStartFailed      = "start_failed"             // 500
	WebhookInternal         = "internal"                 // 500: a bug; the handler recovered
)

// Delivery id headers, in order of preference.
const (
	DeliveryHeader    = "X-GitHub-Delivery"
	IdempotencyHeader = "Idempotency-Key"
)

// MaxDeliveryIDBytes is the longest delivery id accepted.
const MaxDeliveryIDBytes = 256

// webhookHandler serves the enabled webhook schedules, each on its exact path:
//
//   - 404 unknown_webhook: no enabled webhook schedule has the path;
//   - 405 method_not_allowed (with Allow: POST): not a POST;
//   - 403 unsigned_webhook_refused: the schedule has no secret_env and the request arrived on a
//     non-loopback address (the server's side of the connection), unless AllowUnsigned;
//   - 500 webhook_secret_missing: secret_env was empty or unset when the schedule was registered;
//   - 413 payload_too_large: the body exceeds Config.MaxBodyBytes;
//   - 401 invalid_signature: secret_env is set and the signature (X-Hub-Signature-256, or
//     X-Dcc-Flow-Signature with signature: timestamped) is missing, malformed or wrong;
//   - 401 signature_expired: signature: timestamped and its t is more than tolerance_secs away
//     from the server's clock;
//   - 400 invalid_json: the body is not one JSON value (an empty body is the payload null;
//     with Content-Type application/x-www-form-urlencoded the JSON is the `payload` field);
//   - 400 invalid_delivery_id: the delivery id is longer than MaxDeliveryIDBytes;
//   - 200 with "duplicate": true and the first run's id: the delivery id (X-GitHub-Delivery,
//     else Idempotency-Key) already started a run, or (signature: timestamped) the same
//     signature did, whatever the delivery id (a replay within the tolerance window; on a
//     shared database, whichever engine it was sent to);
//   - 429 max_concurrent_exceeded (with in_flight and max): the schedule has max_concurrent
//     runs active;
//   - 500 start_failed: the engine could not start the run;
//   - 202 {"status": "enqueued", "schedule_id", "workflow", "run_id"}: the run started.
//
// Error bodies are {"error": code, "message": text} (plus "schedule_id" once the path is known).
type webhookHandler struct {
	s             *Scheduler
	allowUnsigned bool
}

// HandlerOption configures the webhook handler (Scheduler.Handler).
type HandlerOption func(*webhookHandler)

// AllowUnsigned serves schedules without secret_env to requests from any address. Without it
// such a schedule answers only requests that arrived on a loopback address (403
// unsigned_webhook_refused otherwise): an unsigned webhook lets anyone who reaches it start runs.
func AllowUnsigned() HandlerOption { return func(h *webhookHandler) { h.allowUnsigned = true } }

// AllowsUnsigned reports whether opts include AllowUnsigned.
func AllowsUnsigned(opts ...HandlerOption) bool {
	var h webhookHandler
	for _, o := range opts {
		if o != nil {
			o(&h)
		}
	}
	return h.allowUnsigned
}

// fromLoopback reports whether r arrived on a loopback address of this host (true when the
// server did not record the address, as with a handler called directly).
func fromLoopback(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || a == nil {
		return true
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		host = a.String()
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

type webhookReply struct {
	Status     string `json:"status,omitempty"`
	Error      string `json:"error,omitempty"`
	Message    string `json:"message,omitempty"`
	ScheduleID string `json:"schedule_id,omitempty"`
	Workflow   string `json:"workflow,omitempty"`
	RunID      string `json:"run_id,omitempty"`
	Duplicate  bool   `json:"duplicate,omitempty"`
	InFlight   *int   `json:"in_flight,omitempty"`
	Max        *int   `json:"max,omitempty"`
}

func writeReply(w http.ResponseWriter, status int, r webhookReply) {
	b, _ := json.Marshal(r)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// reply reports the delivery to the scheduler's observer, then writes the reply (so a metrics
// scrape made after the sender saw its answer counts the delivery).
func (h *webhookHandler) reply(w http.ResponseWriter, status int, r webhookReply) {
	defer writeReply(w, status, r)
	if fn := h.s.onDelivery; fn != nil {
		result := r.Error
		switch {
		case r.Duplicate:
			result = "duplicate"
		case result == "":
			result = r.Status
		}
		fn(Delivery{ScheduleID: r.ScheduleID, Status: status, Result: result})
	}
}

func (h *webhookHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.s.log.Error("schedule: webhook handler panic", "path", r.URL.Path, "panic", fmt.Sprint(v))
			h.reply(w, http.StatusInternalServerError, webhookReply{Error: WebhookInternal,
				Message: "internal error in the webhook handler; the request was not processed"})
		}
	}()
	v, _ := h.s.routes.Load(r.URL.Path)
	e, _ := v.(*entry)
	if e == nil {
		h.reply(w, http.StatusNotFound, webhookReply{Error: WebhookUnknown,
			Message: fmt.Sprintf("no enabled webhook schedule has the path %q", r.URL.Path)})
		return
	}
	id := e.spec.ID
	fail := func(status int, code, msg string) {
		h.reply(w, status, webhookReply{Error: code, Message: msg, ScheduleID: id})
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(http.StatusMethodNotAllowed, WebhookMethodNotAllowed, fmt.Sprintf("webhook %q accepts only POST, not %s", r.URL.Path, r.Method))
		return
	}
	if e.spec.Trigger.SecretEnv == "" && !h.allowUnsigned && !fromLoopback(r) {
		fail(http.StatusForbidden, WebhookUnsignedRefused, fmt.Sprintf(
			"schedule %q has no secret_env, so it is served to loopback requests only; set trigger.secret_env to sign its requests with HMAC-SHA256, or opt in with allow_unsigned_webhooks (dcc-flow serve --allow-unsigned-webhooks)", id))
		return
	}
	if e.secretMissing {
		fail(http.StatusInternalServerError, WebhookSecretMissing, fmt.Sprintf(
			"schedule %q: the secret environment variable %s was empty or unset when the schedule was registered; set it and restart the server",
			id, e.spec.Trigger.SecretEnv))
		return
	}
	limit := h.s.cfg.MaxBodyBytes
	tooLarge := func() {
		fail(http.StatusRequestEntityTooLarge, WebhookPayloadTooLarge, fmt.Sprintf("the body is larger than the limit of %d bytes", limit))
	}
	if r.ContentLength > limit {
		tooLarge()
		return
	}
	body, err := readBody(w, r, limit)
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			tooLarge()
			return
		}
		fail(http.StatusBadRequest, WebhookInvalidBody, "reading the request body failed: "+err.Error())
		return
	}
	var replayKey string
	var replayUntil time.Time
	if e.secret != nil {
		mac := e.mac()
		var why string
		if e.spec.Trigger.Signature == SignatureTimestamped {
			var t int64
			t, replayKey, why = verifyTimestamped(mac, body, r.Header.Get(TimestampedSignatureHeader))
			if why == "" {
				tol := int64(e.tolerance / time.Second)
				if now := h.s.clk.Now().Unix(); t < now-tol || t > now+tol {
					e.macs.Put(mac)
					fail(http.StatusUnauthorized, WebhookSignatureExpired, fmt.Sprintf(
						"the signature's t=%d is %+d s from the server's clock; schedule %q accepts %d s (tolerance_secs): sign each request when sending it, and check the sender's clock",
						t, t-now, id, tol))
					return
				}
				replayKey = strconv.FormatInt(t, 10) + "." + replayKey
				replayUntil = time.Unix(t, 0).Add(e.tolerance + time.Second)
			}
		} else {
			why = verifySignature(mac, body, r.Header.Get(SignatureHeader))
		}
		e.macs.Put(mac)
		if why != "" {
			fail(http.StatusUnauthorized, WebhookInvalidSignature, why)
			return
		}
	}
	payload, why := decodePayload(r.Header.Get("Content-Type"), body)
	if why != "" {
		fail(http.StatusBadRequest, WebhookInvalidJSON, why)
		return
	}
	delivery := r.Header.Get(DeliveryHeader)
	if delivery == "" {
		delivery = r.Header.Get(IdempotencyHeader)
	}
	if len(delivery) > MaxDeliveryIDBytes {
		fail(http.StatusBadRequest, WebhookInvalidDelivery, fmt.Sprintf("the delivery id is %d bytes; the limit is %d", len(delivery), MaxDeliveryIDBytes))
		return
	}
	ctx := context.WithoutCancel(r.Context()) // a client hanging up does not abort a start
	a := h.s.admitWebhook(ctx, e, payload, delivery, replayKey, replayUntil)
	switch {
	case a.duplicate:
		h.reply(w, http.StatusOK, webhookReply{Status: "enqueued", ScheduleID: id, Workflow: e.spec.Workflow, RunID: a.fire.RunID, Duplicate: true})
	case a.fire.Kind == FireFired:
		h.reply(w, http.StatusAccepted, webhookReply{Status: "enqueued", ScheduleID: id, Workflow: e.spec.Workflow, RunID: a.fire.RunID})
	case a.fire.Kind == FireSkipped:
		maxC := e.spec.MaxConcurrent
		h.reply(w, http.StatusTooManyRequests, webhookReply{Error: WebhookMaxConcurrent, ScheduleID: id,
			Message:  fmt.Sprintf("schedule %q has %d runs in flight; max_concurrent is %d", id, a.inFlight, maxC),
			InFlight: &a.inFlight, Max: &maxC})
	default:
		fail(http.StatusInternalServerError, WebhookStartFailed, fmt.Sprintf("schedule %q: starting workflow %q failed: %s", id, e.spec.Workflow, a.fire.Message))
	}
}

// readBody reads at most limit bytes of the body; more is a *http.MaxBytesError.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	rd := http.MaxBytesReader(w, r.Body, limit)
	if r.ContentLength > 0 {
		buf := bytes.NewBuffer(make([]byte, 0, r.ContentLength+1))
		_, err := buf.ReadFrom(rd)
		return buf.Bytes(), err
	}
	return io.ReadAll(rd)
}

// decodePayload returns the JSON value of a webhook body, or why it is not one.
func decodePayload(contentType string, body []byte) (any, string) {
	if mt, _, err := mime.ParseMediaType(contentType); err == nil && mt == "application/x-www-form-urlencoded" {
		// curl -d and Python's urllib label a body so unless told otherwise: say what to change
		const asForm = "the body is sent as a form (Content-Type: application/x-www-form-urlencoded, the default of curl -d and urllib) "
		const fix = ": send the JSON with Content-Type: application/json, or as the form field payload=<json>"
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, asForm + "and is not a valid form (" + err.Error() + ")" + fix
		}
		if !vals.Has("payload") {
			return nil, asForm + "and has no `payload` field" + fix
		}
		body = []byte(vals.Get("payload"))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, ""
	}
	v, err := spec.DecodeValue(body) // a 64-bit id in the payload stays exact
	if err != nil {
		return nil, "the body is not valid JSON: " + err.Error()
	}
	return v, ""
}

// admitWebhook handles an authenticated webhook request: a known replay key (a timestamped
// signature already seen) or delivery id returns the first run; otherwise the run is admitted
// (or skipped) and the fire recorded.
//
// The replay keys this engine saw are in e.replays. On a shared database (WithAdmitter and a
// fire history that is a ReplayFinder) the keys every engine saw are in the fire history: the
// fire of a timestamped webhook records its key, and the history is checked for it under the
// schedule's admission lock across engines, like a delivery id, so a signed request replayed
// to another engine behind a load balancer is answered as a duplicate of the first run, with
// the same status and body as on one engine. Without a shared database (SQLite, memory) one
// engine serves the schedule and e.replays is the whole truth: its check costs a map lookup,
// where the history's is a query (and the in-memory history forgets keys by count, not by
// their window), so the history is not consulted.
func (s *Scheduler) admitWebhook(ctx context.Context, e *entry, payload any, delivery, replayKey string, replayUntil time.Time) admission {
	e.admit.Lock()
	defer e.admit.Unlock()
	now := s.clk.Now()
	if replayKey != "" {
		if runID, ok := e.replays.get(replayKey, now); ok {
			return admission{duplicate: true, fire: Fire{RunID: runID}}
		}
	}
	if delivery != "" {
		if runID, ok := e.deliveries.get(delivery, now); ok {
			return admission{duplicate: true, fire: Fire{RunID: runID}}
		}
	}
	f := Fire{ScheduleID: e.spec.ID, Origin: OriginWebhook, ScheduledAt: now, FiredAt: now, DeliveryID: delivery, ReplayKey: replayKey}
	// On a shared database, another engine may be admitting the same delivery (or signature)
	// right now: the history is checked, and the run started, under the schedule's lock across
	// engines.
	unlock, err := s.lockShared(ctx, e, delivery != "" || replayKey != "")
	if err != nil {
		return s.lockFailed(ctx, f, err)
	}
	defer unlock()
	if s.admitter != nil { // the lock may have been waited for
		now = s.clk.Now()
		f.ScheduledAt, f.FiredAt = now, now
	}
	if replayKey != "" && s.admitter != nil {
		if rf, ok := s.fires.(ReplayFinder); ok {
			// A lookup that fails refuses the request (500 start_failed, the fire recorded failed):
			// the guard fails closed, else a replay would start a run whenever the database
			// hiccups. The sender's retry, signed anew, starts the run.
			prev, found, err := rf.FireByReplay(ctx, e.spec.ID, replayKey)
			switch {
			case err != nil:
				f.Kind, f.Reason = FireFailed, ReasonStatusFailed
				f.Message = "looking up the request's signature in the shared fire history (the replay guard) failed: " + err.Error()
				s.record(ctx, f)
				return admission{fire: f, err: err}
			case found && prev.Kind == FireFired:
				e.replays.put(replayKey, prev.RunID, replayUntil, now)
				return admission{duplicate: true, fire: prev}
			}
		}
	}
	if delivery != "" {
		if df, ok := s.fires.(DeliveryFinder); ok {
			prev, found, err := df.FireByDelivery(ctx, e.spec.ID, delivery)
			switch {
			case err != nil && s.admitter != nil:
				// On a shared database the history is the only record of the deliveries the
				// other engines ran: a lookup that fails refuses the request (500 start_failed,
				// the fire recorded failed), as the replay guard does, else a database hiccup
				// would start a second run of a delivery another engine already ran. The
				// sender's retry starts the run.
				f.Kind, f.Reason = FireFailed, ReasonStatusFailed
				f.Message = "looking up the delivery id in the shared fire history (the redelivery guard) failed: " + err.Error()
				s.record(ctx, f)
				return admission{fire: f, err: err}
			case err != nil:
				// One engine serves the schedule (SQLite, memory): e.deliveries, checked above,
				// holds every delivery it ran in the window; the history only extends the
				// window to older deliveries and to those of a previous process, so a failed
				// lookup (a local file that cannot be read, which the run's start, a write to
				// the same file, is likely to meet too) lets the request through, logged.
				s.log.Warn("schedule: looking up a delivery id failed", "schedule_id", e.spec.ID, "delivery_id", delivery, "error", err)
			case found && prev.Kind == FireFired:
				e.deliveries.put(delivery, prev.RunID, now)
				return admission{duplicate: true, fire: prev}
			}
		}
	}
	trig := map[string]any{
		"kind":        string(KindWebhook),
		"schedule_id": e.spec.ID,
		"workflow":    e.spec.Workflow,
		"fired_at":    rfc3339(now),
		"payload":     payload,
	}
	if delivery != "" {
		trig["delivery_id"] = delivery
	}
	a := s.admitLocked(ctx, e, trig, delivery, f)
	if a.fire.Kind == FireFired && delivery != "" {
		e.deliveries.put(delivery, a.fire.RunID, now)
	}
	// Only a signature that started a run is remembered: a sender's retry of a 429 or 500 with
	// the same signature may succeed, as a retry with a fresh one would.
	if a.fire.Kind == FireFired && replayKey != "" {
		e.replays.put(replayKey, a.fire.RunID, replayUntil, now)
	}
	return a
}

// replayGuard remembers the run started by each timestamped signature until its t leaves the
// tolerance window (after which the signature is refused as expired anyway). Only
// authenticated requests that started a run are added, so it holds what the secret's owner sent
// within one window. It is not safe for concurrent use; the schedule's admission lock guards it.
type replayGuard struct {
	byKey map[string]replaySeen
	order []string // keys in the order they were added (about the order of their expiry)
}

type replaySeen struct {
	runID string
	until time.Time
}

func newReplayGuard() *replayGuard { return &replayGuard{byKey: map[string]replaySeen{}} }

func (g *replayGuard) get(key string, now time.Time) (string, bool) {
	v, ok := g.byKey[key]
	if !ok || !now.Before(v.until) {
		return "", false
	}
	return v.runID, true
}

func (g *replayGuard) put(key, runID string, until, now time.Time) {
	i := 0
	for ; i < len(g.order); i++ {
		v, ok := g.byKey[g.order[i]]
		if ok && now.Before(v.until) {
			break
		}
		delete(g.byKey, g.order[i])
	}
	g.order = g.order[i:]
	if cap(g.order) > 64 && len(g.order) < cap(g.order)/4 {
		g.order = append([]string(nil), g.order...) // give back the memory of a burst
	}
	if _, ok := g.byKey[key]; !ok {
		g.order = append(g.order, key)
	}
	g.byKey[key] = replaySeen{runID: runID, until: until}
}

// mac returns a reset HMAC-SHA256 of the entry's secret from its pool.
func (e *entry) mac() hash.Hash {
	if m, ok := e.macs.Get().(hash.Hash); ok {
		return m
	}
	return hmac.New(sha256.New, e.secret)
}
