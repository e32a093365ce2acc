package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Return codes of the exports.
const (
	rcOK           int32 = 0
	rcError        int32 = 1
	rcBadRequest   int32 = 2
	rcInternal     int32 = 3
	maxRequestSize       = run.MaxMessageBytes // 64 MiB, the same bound as a pool worker's messages
)

// op is the Go side of one export: it receives the handle and the raw input JSON and returns a
// JSON-encodable result or an error.
type op func(handle uint64, in []byte) (any, error)

// envelope is the error document of a failed call.
type envelope struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	StepID  string         `json:"step_id,omitempty"`
	Line    int            `json:"line,omitempty"`
	Column  int            `json:"column,omitempty"`
	Details map[string]any `json:"details,omitempty"`
}

// badRequest marks an input that could not be decoded.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

// dispatch runs fn with panic recovery and encodes its result or error. It never panics.
func dispatch(handle uint64, in []byte, fn op) (out []byte, rc int32) {
	defer func() {
		if r := recover(); r != nil {
			out = mustJSON(envelope{
				Code:    run.CodeInternal,
				Message: fmt.Sprintf("internal error (a bug in dcc-flow; please report it): %v", r),
				Details: map[string]any{"stack": string(debug.Stack())},
			})
			rc = rcInternal
		}
	}()
	if len(in) == 0 {
		in = []byte("{}")
	}
	if len(in) > maxRequestSize {
		return mustJSON(envelope{Code: run.CodeTooLarge, Message: fmt.Sprintf("the request is %d bytes; the limit is %d", len(in), maxRequestSize)}), rcError
	}
	res, err := fn(handle, in)
	if err != nil {
		var br *badRequest
		if errors.As(err, &br) {
			return mustJSON(envelope{Code: run.CodeInvalidRequest, Message: br.msg}), rcBadRequest
		}
		return mustJSON(errorEnvelope(err)), rcError
	}
	b, err := spec.CanonicalValue(res)
	if err != nil {
		return mustJSON(envelope{Code: run.CodeInternal, Message: "encoding the result: " + err.Error()}), rcInternal
	}
	return b, rcOK
}

// errorEnvelope converts an engine error into the envelope, keeping every validation problem:
// a spec's and a schedule set's ValidationError alike (spec.ProblemError), with the first
// problem's step id and position on the envelope.
func errorEnvelope(err error) envelope {
	var pe spec.ProblemError
	if errors.As(err, &pe) {
		ps := pe.ProblemList()
		env := envelope{Code: pe.ErrorCode(), Message: pe.Error(), Details: map[string]any{"problems": ps}}
		if len(ps) > 0 {
			env.StepID, env.Line, env.Column = ps[0].StepID, ps[0].Line, ps[0].Column
		}
		return env
	}
	var re *run.Error
	if errors.As(err, &re) {
		return envelope{Code: re.Code, Message: re.Error(), StepID: re.StepID, Details: re.Details}
	}
	return envelope{Code: run.CodeOf(err), Message: err.Error()}
}

func mustJSON(v any) []byte {
	b, err := spec.CanonicalValue(v)
	if err != nil {
		return []byte(`{"code":"internal","message":"encoding an error envelope failed"}`)
	}
	return b
}

// decode unmarshals a request strictly: unknown fields and trailing data are errors.
// Text that is not UTF-8 and duplicate keys are refused too (checkRequestText).
func decode(in []byte, v any) error {
	if err := checkRequestText(in); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &badRequest{msg: "invalid request JSON: " + err.Error()}
	}
	if dec.More() {
		return &badRequest{msg: "invalid request JSON: unexpected data after the request object"}
	}
	return nil
}
