// Command webhookload is the webhook load generator: it starts the scheduler's webhook handler
// on 127.0.0.1:0 with a fake Starter, hammers it with concurrent keep-alive clients sending
// HMAC-signed bodies for a fixed duration (default 3 s; it stops by itself), and prints the
// accepted requests per second (goal: ≥ 10k on loopback, docs/design/performance.md).
//
//	go run ./scripts/webhookload [-duration 3s] [-clients 32] [-body 1024] [-delivery-ids=true] [-min 10000]
//
// The generator itself lives in engine/internal/schedule/webhookload, because Go's
// internal-package rule lets only code under engine/ import engine/internal/schedule. This
// program runs it with `go run` from the module root and passes the flags and exit status
// through.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "webhookload:", err)
		os.Exit(1)
	}
	cmd := exec.Command("go", append([]string{"run", "./engine/internal/schedule/webhookload"}, os.Args[1:]...)...)
	cmd.Dir = root
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "webhookload:", err)
		os.Exit(1)
	}
}

// moduleRoot returns the directory of the dcc-flow go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run from inside the dcc-flow module (go env GOMOD is empty)")
	}
	return filepath.Dir(mod), nil
}
