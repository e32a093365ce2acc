package schedule

import "github.com/dcc-flow/dcc-flow/engine/flowtype"

// TriggerKind is the kind of a schedule's trigger (flowtype.TriggerKind).
type TriggerKind = flowtype.TriggerKind

// Trigger kinds.
const (
	KindCron     = flowtype.TriggerCron
	KindInterval = flowtype.TriggerInterval
	KindWebhook  = flowtype.TriggerWebhook
)

// TriggerKinds lists every trigger kind, in documentation order.
var TriggerKinds = []TriggerKind{KindCron, KindInterval, KindWebhook}

// Spec is one schedule: which workflow to start, with which inputs, and when. It is defined in
// public (flowtype.ScheduleSpec, whose UnmarshalJSON applies the file defaults); the scheduler
// uses it under this name.
//
// The zero values of Enabled and MaxConcurrent are not the file defaults (true and 1): build
// specs with Parse, LoadDir, DefaultSpec or json.Unmarshal (which apply the defaults), or set
// both fields explicitly.
type Spec = flowtype.ScheduleSpec

// Trigger is a schedule's trigger (flowtype.ScheduleTrigger). Only the fields of its Kind may be
// set.
type Trigger = flowtype.ScheduleTrigger

// Webhook signature modes (Trigger.Signature).
const (
	SignatureGitHub      = flowtype.SignatureGitHub
	SignatureTimestamped = flowtype.SignatureTimestamped
)

// Defaults and range of Trigger.ToleranceSecs.
const (
	DefaultToleranceSecs = flowtype.DefaultToleranceSecs
	MaxToleranceSecs     = flowtype.MaxToleranceSecs
)

// DefaultSpec returns a Spec with the file defaults: enabled, max_concurrent 1, no catch-up.
func DefaultSpec(id, workflow string, trigger Trigger) Spec {
	return Spec{ID: id, Workflow: workflow, Enabled: true, MaxConcurrent: 1, Trigger: trigger}
}
