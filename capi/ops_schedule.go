package main

import (
	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

type schedulesParseRequest struct {
	Text   *string `json:"text"`
	Source string  `json:"source"`
}

// opSchedulesParse: {"text", "source"?} → {"schedules": [schedule…]} or validation_failed.
func opSchedulesParse(_ uint64, in []byte) (any, error) {
	var req schedulesParseRequest
	if err := decode(in, &req); err != nil {
		return nil, err
	}
	if req.Text == nil {
		return nil, &badRequest{msg: `invalid request: "text" (the schedules file's YAML) is required`}
	}
	specs, err := engine.ParseSchedules([]byte(*req.Text), req.Source, nil)
	if err != nil {
		return nil, err
	}
	if specs == nil {
		specs = []flowtype.ScheduleSpec{}
	}
	return map[string]any{"schedules": specs}, nil
}

type schedulesValidateRequest struct {
	Schedules []flowtype.ScheduleSpec `json:"schedules"`
}

// opSchedulesValidate: {"schedules": [schedule…]} → {"valid": true} or validation_failed.
func opSchedulesValidate(_ uint64, in []byte) (any, error) {
	var req schedulesValidateRequest
	if err := decode(in, &req); err != nil {
		return nil, err
	}
	if err := engine.ValidateSchedules(req.Schedules, nil); err != nil {
		return nil, err
	}
	return map[string]bool{"valid": true}, nil
}
