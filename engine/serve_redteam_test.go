package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

// TestRedteamServeWebhooksRefusesUnsignedOffLoopback: serving webhooks on an address that is not
// loopback is refused while an enabled webhook schedule has no secret_env (the error names the
// schedule and secret_env), unless the caller opts in; loopback addresses and signed-only sets
// pass. Before the fix ServeWebhooks("0.0.0.0:…") served unsigned schedules to the network.
// Nothing here listens off loopback: the refusal comes before the listen, and the passing cases
// are checked without listening.
func TestRedteamServeWebhooksRefusesUnsignedOffLoopback(t *testing.T) {
	ctx := context.Background()
	e, err := Open(ctx, Config{}, WithEnviron(func() []string { return []string{"HOOK_SECRET=s3cret"} }))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.Register(mustParse(t, "name: hook\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")); err != nil {
		t.Fatal(err)
	}
	if err := e.Schedule(flowtype.ScheduleSpec{ID: "signed_push", Workflow: "hook", Enabled: true, MaxConcurrent: 1,
		Trigger: flowtype.ScheduleTrigger{Kind: "webhook", Path: "/signed", SecretEnv: "HOOK_SECRET"}}); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0", "10.0.0.1:8787", ":8787"} {
		if err := e.checkUnsignedWebhooks(addr, nil); err != nil {
			t.Fatalf("only signed schedules, %s: %v", addr, err)
		}
	}
	if err := e.Schedule(flowtype.ScheduleSpec{ID: "on_push", Workflow: "hook", Enabled: true, MaxConcurrent: 1,
		Trigger: flowtype.ScheduleTrigger{Kind: "webhook", Path: "/push"}}); err != nil {
		t.Fatal(err)
	}
	ws, err := e.ServeWebhooks("0.0.0.0:0")
	if err == nil {
		ws.Close(ctx)
		t.Fatal("an unsigned webhook schedule was served on 0.0.0.0")
	}
	for _, want := range []string{`"on_push"`, "secret_env", "allow_unsigned_webhooks", "0.0.0.0:0"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal does not say %s: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "signed_push") {
		t.Fatalf("the refusal names a signed schedule: %v", err)
	}
	for _, addr := range []string{"192.0.2.7:8787", ":8787", "studio-host:8787"} {
		if err := e.checkUnsignedWebhooks(addr, nil); err == nil {
			t.Fatalf("%s was accepted with an unsigned schedule", addr)
		}
		if err := e.checkUnsignedWebhooks(addr, []WebhookOption{AllowUnsignedWebhooks()}); err != nil {
			t.Fatalf("%s, opted in: %v", addr, err)
		}
	}
	ws, err = e.ServeWebhooks("127.0.0.1:0")
	if err != nil {
		t.Fatalf("loopback: %v", err)
	}
	ws.Close(ctx)
}
