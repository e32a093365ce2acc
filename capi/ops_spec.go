package main

import (
	"encoding/json"
	"runtime"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// versionResult is the output of dccflow_version.
type versionResult struct {
	Version    string `json:"version"`
	ABIVersion int    `json:"abi_version"`
	GoVersion  string `json:"go_version"`
}

func opVersion(uint64, []byte) (any, error) {
	return versionResult{Version: engine.Version, ABIVersion: abiVersion, GoVersion: runtime.Version()}, nil
}

// specRequest is the input of dccflow_spec_parse and dccflow_spec_validate.
type specRequest struct {
	Text   *string `json:"text"`
	Format string  `json:"format"`
	Source string  `json:"source"`
}

func (r *specRequest) parse(in []byte) (*spec.Spec, error) {
	if err := decode(in, r); err != nil {
		return nil, err
	}
	if r.Text == nil {
		return nil, &badRequest{msg: `invalid request: "text" (the spec's YAML or JSON text) is required`}
	}
	switch spec.Format(r.Format) {
	case "", spec.FormatAuto, spec.FormatYAML, spec.FormatJSON:
	default:
		return nil, &badRequest{msg: `invalid request: "format" must be "auto", "yaml" or "json"`}
	}
	return spec.Parse([]byte(*r.Text), spec.Options{Format: spec.Format(r.Format), Source: r.Source})
}

// parseResult is the output of dccflow_spec_parse.
type parseResult struct {
	Spec     json.RawMessage `json:"spec"`
	SpecHash string          `json:"spec_hash"`
	Warnings []spec.Problem  `json:"warnings"`
	Problems []spec.Problem  `json:"problems"`
}

func opSpecParse(_ uint64, in []byte) (any, error) {
	var req specRequest
	s, err := req.parse(in)
	if err != nil {
		return nil, err
	}
	return parseResult{
		Spec:     json.RawMessage(s.Canonical()),
		SpecHash: s.Hash(),
		Warnings: nonNil(s.Warnings()),
		Problems: nonNil(s.Problems()),
	}, nil
}

// validateResult is the output of dccflow_spec_validate.
type validateResult struct {
	Valid    bool           `json:"valid"`
	SpecHash string         `json:"spec_hash"`
	Warnings []spec.Problem `json:"warnings"`
}

func opSpecValidate(_ uint64, in []byte) (any, error) {
	var req specRequest
	s, err := req.parse(in)
	if err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return validateResult{Valid: true, SpecHash: s.Hash(), Warnings: nonNil(s.Warnings())}, nil
}

func nonNil(ps []spec.Problem) []spec.Problem {
	if ps == nil {
		return []spec.Problem{}
	}
	return ps
}
