package flowtype

import "encoding/json"

// TriggerKind is the kind of a schedule's trigger.
type TriggerKind string

// Trigger kinds.
const (
	TriggerCron     TriggerKind = "cron"
	TriggerInterval TriggerKind = "interval"
	TriggerWebhook  TriggerKind = "webhook"
)

// ScheduleSpec is one schedule: which workflow to start, with which inputs, and when.
//
// The zero values of Enabled and MaxConcurrent are not the file defaults (true and 1): build
// specs with engine.ParseSchedules, engine.LoadSchedules or json.Unmarshal (which apply the
// defaults), or set both fields explicitly.
type ScheduleSpec struct {
	// ID names the schedule; unique among the scheduler's schedules. [A-Za-z0-9_.-], 1 to 128
	// characters.
	ID string `json:"id"`
	// Workflow is the catalog name of the workflow to start.
	Workflow string `json:"workflow"`
	// Inputs are the run's inputs. Strings may hold {{trigger.…}} templates, rendered at each
	// fire; a string that is exactly one placeholder keeps the value's JSON type.
	Inputs map[string]any `json:"inputs,omitempty"`
	// Enabled schedules fire; disabled ones are validated and listed but never fire (and their
	// webhook path answers 404). Default true.
	Enabled bool `json:"enabled"`
	// MaxConcurrent caps the runs of this schedule that are not terminal. A cron or interval fire
	// over the cap is skipped (and recorded); a webhook over the cap gets 429. Default 1;
	// 0 means unlimited; negative is invalid.
	MaxConcurrent int `json:"max_concurrent"`
	// Catchup makes a cron or interval schedule fire once at start when a fire was missed while
	// the scheduler was down. Default false. Not valid on webhooks.
	Catchup bool `json:"catchup"`
	// Trigger says when the schedule fires.
	Trigger ScheduleTrigger `json:"trigger"`

	// Source and Line locate the schedule in its file, when it was loaded from one.
	Source string `json:"source,omitempty"`
	Line   int    `json:"line,omitempty"`
}

// ScheduleTrigger is a schedule's cron, interval or webhook trigger. Only the fields of its Kind may be set.
type ScheduleTrigger struct {
	Kind TriggerKind `json:"kind"`

	// Expression (cron) is a 6-field cron expression, seconds first ("0 0 3 * * *"), or a
	// descriptor: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly,
	// "@every <duration>".
	Expression string `json:"expression,omitempty"`
	// Timezone (cron) is the IANA zone the expression is evaluated in; "" means UTC.
	Timezone string `json:"timezone,omitempty"`
	// JitterSecs (cron) delays each fire by a uniform random duration in [0, JitterSecs]
	// seconds. 0 means no jitter; negative is invalid.
	JitterSecs int `json:"jitter_secs,omitempty"`

	// Every (interval) is a Go duration of at least 1s: "30s", "15m", "1h30m".
	Every string `json:"every,omitempty"`

	// Path (webhook) is the URL path the webhook answers on; it starts with "/".
	Path string `json:"path,omitempty"`
	// SecretEnv (webhook) names the environment variable holding the HMAC-SHA256 secret. When
	// set, every request must carry a valid signature (see Signature). "" means no signature
	// check.
	SecretEnv string `json:"secret_env,omitempty"`
	// Signature (webhook, with SecretEnv) is how requests are signed: "github" ("" means the
	// same) is GitHub's X-Hub-Signature-256 over the body; "timestamped" is
	// X-Dcc-Flow-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>"> (as Stripe
	// signs), refused outside ToleranceSecs and answered as a duplicate when replayed: only
	// "timestamped" resists replay.
	Signature string `json:"signature,omitempty"`
	// ToleranceSecs (webhook, signature "timestamped") is how far a request's t may be from the
	// server's clock: 0 means DefaultToleranceSecs; else 1 to MaxToleranceSecs.
	ToleranceSecs int `json:"tolerance_secs,omitempty"`
}

// Webhook signature modes (ScheduleTrigger.Signature).
const (
	SignatureGitHub      = "github"
	SignatureTimestamped = "timestamped"
)

// Defaults and range of ScheduleTrigger.ToleranceSecs.
const (
	DefaultToleranceSecs = 300
	MaxToleranceSecs     = 3600
)

// UnmarshalJSON decodes a ScheduleSpec and applies the file defaults to absent fields (enabled
// true, max_concurrent 1). It does not validate.
func (s *ScheduleSpec) UnmarshalJSON(b []byte) error {
	type plain ScheduleSpec
	p := plain{Enabled: true, MaxConcurrent: 1}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = ScheduleSpec(p)
	return nil
}
