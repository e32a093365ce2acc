package schedule

import (
	"fmt"
	"strings"
	"testing"
)

// checkSpec reports every problem of a spec at once, section after section: id, workflow,
// max_concurrent, catchup, inputs, the trigger of its kind, then the fields of another kind.
// The tests pin whole lists, so that the sections can be rearranged in code without changing
// what a user reads.
func TestCheckSpecReportsEverySectionInOrder(t *testing.T) {
	known := func(name string) bool { return name == "ping" }
	for _, tc := range []struct {
		name string
		spec Spec
		want []string
	}{
		{"webhook", Spec{ID: "bad id!", Workflow: "nope", MaxConcurrent: -1, Catchup: true,
			Inputs: map[string]any{"a": "{{trigger.nope}}"},
			Trigger: Trigger{Kind: KindWebhook, Path: "no-slash", SecretEnv: "1BAD", Signature: SignatureTimestamped,
				ToleranceSecs: 99999, Expression: "0 * * * * *", Every: "1m"}},
			[]string{
				"invalid_id id: `id` \"bad id!\" is not a valid schedule id; use 1 to 128 letters, digits, '_', '.' or '-'",
				"unknown_workflow workflow: `workflow` \"nope\" is not in the workflow catalog; fix the name or register the workflow (a workflow file, SKILL.md metadata or Engine registration)",
				"invalid_value max_concurrent: `max_concurrent` is -1; use 1 (the default) for one run at a time, a larger number, or 0 for no limit",
				"invalid_value catchup: `catchup` applies to cron and interval triggers, not webhooks; remove `catchup: true`",
				"unknown_template_var inputs.a: `inputs.a` uses {{trigger.nope}}, which is not a trigger field; use one of: kind, schedule_id, workflow, fired_at, scheduled_at, catchup, payload, delivery_id",
				"invalid_webhook_path trigger.path: `trigger.path` \"no-slash\" does not start with \"/\"; use \"/no-slash\"",
				"invalid_value trigger.secret_env: `trigger.secret_env` \"1BAD\" is not an environment variable name; use letters, digits and '_', not starting with a digit, e.g. UPLOAD_WEBHOOK_SECRET",
				"invalid_value trigger.tolerance_secs: `trigger.tolerance_secs` is 99999; it must be from 1 to 3600 seconds; remove it for the default (300 s) or use e.g. tolerance_secs: 300",
				"unknown_field trigger.expression: `trigger.expression` is set on a webhook trigger; `expression` is only valid on cron triggers; remove it",
				"unknown_field trigger.every: `trigger.every` is set on a webhook trigger; `every` is only valid on interval triggers; remove it",
			}},
		{"webhook github", Spec{ID: "gh", Workflow: "ping", MaxConcurrent: 1,
			Trigger: Trigger{Kind: KindWebhook, ToleranceSecs: 5, Timezone: "UTC"}},
			[]string{
				"missing_field trigger.path: missing field `trigger.path`; add e.g. path: /webhooks/upload",
				"invalid_value trigger.tolerance_secs: `trigger.tolerance_secs` applies to signature: timestamped only; add signature: timestamped (requests signed with a timestamp), or remove tolerance_secs",
				"unknown_field trigger.timezone: `trigger.timezone` is set on a webhook trigger; `timezone` is only valid on cron triggers; remove it",
			}},
		{"webhook timestamped", Spec{ID: "ts", Workflow: "ping", MaxConcurrent: 1,
			Trigger: Trigger{Kind: KindWebhook, Path: "/ts", Signature: SignatureTimestamped, ToleranceSecs: -1}},
			[]string{
				"missing_field trigger.secret_env: `trigger.signature` is timestamped but `trigger.secret_env` is missing; add secret_env: the environment variable holding the HMAC-SHA256 secret, e.g. UPLOAD_WEBHOOK_SECRET",
				"invalid_value trigger.tolerance_secs: `trigger.tolerance_secs` is -1; it must be from 1 to 3600 seconds; remove it for the default (300 s) or use e.g. tolerance_secs: 300",
			}},
		{"webhook signature", Spec{ID: "sig", Workflow: "ping", MaxConcurrent: 1,
			Trigger: Trigger{Kind: KindWebhook, Path: "/x", Signature: "stripe"}},
			[]string{
				"invalid_value trigger.signature: `trigger.signature` \"stripe\" is not a signature mode; use github (X-Hub-Signature-256 over the body) or timestamped (X-Dcc-Flow-Signature: t=…,v1=…, resists replay)",
			}},
		{"cron", Spec{Workflow: "", MaxConcurrent: 1,
			Trigger: Trigger{Kind: KindCron, JitterSecs: -1, Timezone: "Mars/Olympus", Path: "/x"}},
			[]string{
				"missing_field id: missing field `id`; add `id: <name>`; use 1 to 128 letters, digits, '_', '.' or '-'",
				"missing_field workflow: missing field `workflow`; add `workflow: <name of a workflow in the catalog>`",
				"invalid_value trigger.jitter_secs: `trigger.jitter_secs` is -1; use 0 (no jitter) to 86400 seconds",
				"missing_field trigger.expression: missing field `trigger.expression`; add e.g. expression: \"0 0 3 * * *\" (second minute hour day-of-month month day-of-week)",
				"invalid_timezone trigger.timezone: `trigger.timezone` \"Mars/Olympus\" is not a known time zone; use an IANA time zone name such as \"UTC\", \"Europe/Paris\" or \"America/New_York\"",
				"unknown_field trigger.path: `trigger.path` is set on a cron trigger; `path` is only valid on webhook triggers; remove it",
			}},
		{"cron expression", Spec{ID: "c", Workflow: "ping", MaxConcurrent: 1,
			Trigger: Trigger{Kind: KindCron, Expression: "not cron", SecretEnv: "S"}},
			[]string{
				"invalid_cron trigger.expression: `trigger.expression` \"not cron\" has 2 fields; write 6 fields: second minute hour day-of-month month day-of-week, e.g. \"0 0 3 * * *\" for 03:00 every day",
				"unknown_field trigger.secret_env: `trigger.secret_env` is set on a cron trigger; `secret_env` is only valid on webhook triggers; remove it",
			}},
		{"interval", Spec{ID: "i", Workflow: "ping", MaxConcurrent: 1,
			Trigger: Trigger{Kind: KindInterval, Every: "1ms", Signature: SignatureGitHub}},
			[]string{
				"invalid_interval trigger.every: `trigger.every` \"1ms\" is shorter than 1s; write a positive Go duration of at least 1s, such as \"30s\", \"15m\" or \"1h30m\" (use \"24h\" for a day)",
				"unknown_field trigger.signature: `trigger.signature` is set on a interval trigger; `signature` is only valid on webhook triggers; remove it",
			}},
		{"interval missing", Spec{ID: "i", Workflow: "ping", MaxConcurrent: 1, Trigger: Trigger{Kind: KindInterval}},
			[]string{
				"missing_field trigger.every: missing field `trigger.every`; add e.g. every: \"15m\"",
			}},
		{"missing kind", Spec{ID: "k", Workflow: "nope", MaxConcurrent: 1, Trigger: Trigger{Expression: "x"}},
			[]string{
				"unknown_workflow workflow: `workflow` \"nope\" is not in the workflow catalog; fix the name or register the workflow (a workflow file, SKILL.md metadata or Engine registration)",
				"missing_field trigger.kind: missing field `trigger.kind`; add `kind: cron`, `kind: interval` or `kind: webhook` under `trigger`",
			}},
		{"unknown kind", Spec{ID: "k", Workflow: "ping", MaxConcurrent: 1, Trigger: Trigger{Kind: "crom", Every: "1m"}},
			[]string{
				"unknown_kind trigger.kind: unknown trigger kind \"crom\"; did you mean \"cron\"?",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fps, trig := checkSpec(&tc.spec, known)
			got := make([]string, len(fps))
			for i, p := range fps {
				got[i] = fmt.Sprintf("%s %s: %s; %s", p.code, p.field, p.msg, p.hint)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if trig != nil {
				t.Errorf("a spec with problems compiled its trigger: %v", trig)
			}
		})
	}
	ok := DefaultSpec("nightly", "ping", Trigger{Kind: KindCron, Expression: "0 0 3 * * *", Timezone: "UTC"})
	if fps, trig := checkSpec(&ok, known); fps != nil || trig == nil {
		t.Errorf("a valid spec: problems %v, trigger %v", fps, trig)
	}
}
