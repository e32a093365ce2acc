package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// maxBatchAnswers bounds the answers of one dccflow_calls_complete_many (a puller answers the
// calls it took in one calls_next, whose "max" a host keeps small; 1,024 is far above that).
const maxBatchAnswers = 1024

// completeManyRequest is the input of dccflow_calls_complete_many: several answers, each a
// calls_complete request without "next", and the one "next" of the crossing.
type completeManyRequest struct {
	Answers []json.RawMessage `json:"answers"`
	Next    *nextRequest      `json:"next"`
}

// completeManyResult is its output: "accepted" per answer, in order, and the fields of
// calls_next when "next" was given.
type completeManyResult struct {
	Accepted []bool      `json:"accepted"`
	Calls    []callJSON  `json:"calls"`
	Run      *runSummary `json:"run,omitempty"`
	Events   []run.Event `json:"events,omitempty"`
}

// opCallsCompleteMany answers several calls and pulls the next ones in one crossing: the fan-out
// case, where a puller took several ready calls at once (docs/reference/c-abi/calls.md). Every
// answer is decoded and checked before any is taken, so a malformed one (code invalid_request,
// naming answers[i]) takes none. An answer the host refuses (an unknown call: not_found; one not
// pulled: invalid_state) does not stop the others: they are taken, then the crossing fails with
// the first refusal's code, naming its index, and "next" is not served.
var opCallsCompleteMany = withEngine(func(e *engine.Engine, req *completeManyRequest) (any, error) {
	if len(req.Answers) > maxBatchAnswers {
		return nil, &badRequest{msg: fmt.Sprintf(`invalid request: %d answers; at most %d in one crossing`, len(req.Answers), maxBatchAnswers)}
	}
	answers := make([]completeRequest, len(req.Answers))
	for i, raw := range req.Answers {
		a := &answers[i]
		if a.decodeQuick(raw) {
			continue
		}
		if err := a.decodeRequest(raw); err != nil {
			var bad *badRequest
			if errors.As(err, &bad) {
				return nil, &badRequest{msg: fmt.Sprintf("answers[%d]: %s", i, bad.msg)}
			}
			return nil, err
		}
		if a.CallID == 0 {
			return nil, &badRequest{msg: fmt.Sprintf(`invalid request: answers[%d].call_id is required`, i)}
		}
		if a.Next != nil {
			return nil, &badRequest{msg: fmt.Sprintf(`invalid request: answers[%d] has a "next"; give one "next" beside "answers"`, i)}
		}
	}
	res := completeManyResult{Accepted: make([]bool, len(answers))}
	var refused error
	for i := range answers {
		err := e.Host().Complete(answers[i].CallID, answers[i].result())
		switch {
		case err == nil:
			res.Accepted[i] = true
		case errors.Is(err, flowtype.ErrDropped):
			// a late result: the call timed out or was cancelled
		case refused == nil:
			var re *run.Error
			if errors.As(err, &re) {
				c := *re
				c.Message = fmt.Sprintf("answers[%d]: %s", i, re.Message)
				refused = &c
			} else {
				refused = fmt.Errorf("answers[%d]: %w", i, err)
			}
		}
	}
	if refused != nil {
		return nil, refused
	}
	if req.Next == nil {
		return map[string][]bool{"accepted": res.Accepted}, nil // no "calls": null
	}
	var nr nextResult
	if err := next(e, req.Next, &nr); err != nil {
		return nil, err
	}
	res.Calls, res.Run, res.Events = nr.Calls, nr.Run, nr.Events
	return res, nil
})

// quickPrefix is how an answer of a call that returned starts when it has nothing but a
// call_id and an output, as Python writes it (dcc_flow._tools.execute).
const quickPrefix = `{"call_id":`

// decodeQuick decodes raw, an answer of a complete_many request, when it is exactly
// {"call_id":N,"output":V} (N a non-zero JSON integer, no spaces outside V): the common answer of
// a fan-out, without a json.Decoder per answer. It reports false, leaving r as it was, for any
// other text, which decodeRequest then decodes and checks as strictly as ever (unknown keys,
// other keys' case, files, env, an error). The request's text was already checked whole (UTF-8,
// duplicate keys, valid JSON) by the decode of the request, so V is a JSON value once it is one
// value alone (json.Valid); it is copied, so the output the engine keeps does not hold the
// request's buffer.
func (r *completeRequest) decodeQuick(raw []byte) bool {
	if len(raw) < len(quickPrefix)+len(`0,"output":0}`) || string(raw[:len(quickPrefix)]) != quickPrefix || raw[len(raw)-1] != '}' {
		return false
	}
	return r.decodeQuickBody(raw[len(quickPrefix) : len(raw)-1])
}

// quickNext is how the "next" of a calls_complete starts when Python's complete appends it, last,
// to an answer of the quick shape (dcc_flow._driver.Driver.complete).
const quickNext = `,"next":`

// decodeQuickNext decodes in, a whole calls_complete request, when it is exactly
// {"call_id":N,"output":V,"next":X}: the answer of a sequential Python step and its next pull,
// without a json.Decoder for the answer. X is decoded as strictly as any request (decode). It
// reports false, leaving r as it was, for any other text (decodeRequest then decodes it as
// before), and returns an error only for text that is not a valid request either way (bytes
// that are not UTF-8, a duplicate key, an X that decode refuses). A wrong split is impossible:
// the last `,"next":` of the text is the member's when the text has this shape, and any other
// split leaves a V or an X that is not one JSON value.
func (r *completeRequest) decodeQuickNext(in []byte) (bool, error) {
	if len(in) < len(quickPrefix)+len(`0,"output":0,"next":{}}`) || string(in[:len(quickPrefix)]) != quickPrefix || in[len(in)-1] != '}' {
		return false, nil
	}
	k := bytes.LastIndex(in, []byte(quickNext))
	if k < len(quickPrefix) {
		return false, nil
	}
	if err := checkRequestText(in); err != nil {
		return false, err
	}
	var quick completeRequest
	if !quick.decodeQuickBody(in[len(quickPrefix):k]) {
		return false, nil
	}
	nr, ok := nextTexts.decode(in[k+len(quickNext) : len(in)-1])
	if !ok {
		return false, nil // decodeRequest decodes it again and names the error
	}
	quick.Next = nr
	*r = quick
	return true, nil
}

// nextTexts remembers the decoded "next" of recent calls_complete requests by their text: a host
// thread sends the same one with every answer while it drives a run, and its strict decoding (a
// json.Decoder) was most of a step's decoding (3.5 µs).
var nextTexts nextCache

// nextCache holds the last few distinct "next" texts decoded, with what they decode to.
type nextCache struct {
	mu      sync.Mutex
	entries [8]nextCacheEntry
	last    int // the entry written last
}

type nextCacheEntry struct {
	text string
	req  nextRequest
}

// decode returns text decoded as decode does (strictly), from the cache when the same text was
// decoded lately; false when decode refuses it or it is null. The request returned is a copy:
// its Lanes and EventsAfter are shared with the cache and must not be written.
func (c *nextCache) decode(text []byte) (*nextRequest, bool) {
	c.mu.Lock()
	for i := range c.entries {
		if e := &c.entries[i]; e.text != "" && e.text == string(text) {
			nr := e.req
			c.mu.Unlock()
			return &nr, true
		}
	}
	c.mu.Unlock()
	var nr *nextRequest
	if err := decode(text, &nr); err != nil || nr == nil {
		return nil, false
	}
	if len(text) <= 1024 { // a pull request is short; a long one is not worth keeping
		c.mu.Lock()
		c.last = (c.last + 1) % len(c.entries)
		c.entries[c.last] = nextCacheEntry{text: string(text), req: *nr}
		c.mu.Unlock()
	}
	return nr, true
}

// decodeQuickBody decodes `N,"output":V` (the text between quickPrefix and the closing brace)
// as decodeQuick describes.
func (r *completeRequest) decodeQuickBody(rest []byte) bool {
	n := 0
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n > 20 || rest[0] == '0' || !bytes.HasPrefix(rest[n:], []byte(`,"output":`)) {
		return false
	}
	id, err := strconv.ParseUint(string(rest[:n]), 10, 64)
	if err != nil {
		return false
	}
	out := bytes.TrimSpace(rest[n+len(`,"output":`):])
	if len(out) == 0 || !json.Valid(out) {
		return false // more members after the output (files, env), or none
	}
	*r = completeRequest{CallID: id, Output: bytes.Clone(out)}
	return true
}
