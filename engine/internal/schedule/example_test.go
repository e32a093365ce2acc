package schedule_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/schedule"
)

func ExampleParse() {
	specs, err := schedule.Parse([]byte(`
schedules:
  - id: nightly_cleanup
    workflow: scene_cleanup
    inputs: {scope: all-scenes}
    trigger: {kind: cron, expression: "0 0 3 * * *", timezone: Europe/Paris, jitter_secs: 120}
`), schedule.ParseOptions{File: "maintenance.schedules.yaml"})
	if err != nil {
		fmt.Println(err)
		return
	}
	s := specs[0]
	fmt.Println(s.ID, s.Workflow, s.Trigger.Kind, s.Trigger.Expression, s.Trigger.Timezone, s.Enabled, s.MaxConcurrent)

	_, err = schedule.Parse([]byte(`
schedules:
  - id: nightly
    workflow: scene_cleanup
    trigger: {kind: cron, expression: "0 3 * * *"}
`), schedule.ParseOptions{File: "maintenance.schedules.yaml"})
	fmt.Println(err)
	// Output:
	// nightly_cleanup scene_cleanup cron 0 0 3 * * * Europe/Paris true 1
	// maintenance.schedules.yaml:5:39: schedule "nightly": `trigger.expression` "0 3 * * *" has 5 fields; schedules need 6, with seconds first; use "0 0 3 * * *"
}

func ExampleHMACSHA256Hex() {
	secret, body := []byte("It's a Secret to Everybody"), []byte("Hello, World!")
	header := "sha256=" + schedule.HMACSHA256Hex(secret, body)
	fmt.Println(header)
	fmt.Println(schedule.VerifyHubSignature256(secret, body, header))
	fmt.Println(schedule.VerifyHubSignature256(secret, []byte("Hello, World?"), header))
	// Output:
	// sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17
	// true
	// false
}

// printStarter is a Starter that prints what it starts.
type printStarter struct{}

func (printStarter) Start(_ context.Context, req schedule.StartRequest) (string, error) {
	fmt.Printf("start %s for %s with %v\n", req.Workflow, req.ScheduleID, req.Inputs)
	return "run-1", nil
}

func (printStarter) Active(context.Context, string) (int, error) { return 0, nil }

func ExampleScheduler_Handler() {
	spec := schedule.DefaultSpec("on_upload", "validate_upload",
		schedule.Trigger{Kind: schedule.KindWebhook, Path: "/webhooks/upload", SecretEnv: "UPLOAD_WEBHOOK_SECRET"})
	spec.Inputs = map[string]any{"path": "{{trigger.payload.file_path}}", "size": "{{trigger.payload.size}}"}
	s, err := schedule.New(schedule.Config{
		Schedules: []schedule.Spec{spec},
		LookupEnv: func(string) (string, bool) { return "shared-secret", true },
	}, printStarter{}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	body := `{"file_path": "/uploads/a.ma", "size": 42}`
	req := httptest.NewRequest("POST", "/webhooks/upload", strings.NewReader(body))
	req.Header.Set("X-Hub-Signature-256", "sha256="+schedule.HMACSHA256Hex([]byte("shared-secret"), []byte(body)))
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	fmt.Print(rec.Code, " ", rec.Body)
	// Output:
	// start validate_upload for on_upload with map[path:/uploads/a.ma size:42]
	// 202 {"status":"enqueued","schedule_id":"on_upload","workflow":"validate_upload","run_id":"run-1"}
}
