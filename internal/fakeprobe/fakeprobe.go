// Package fakeprobe is a stand-in for a licence server's status command (FlexLM's `lmutil
// lmstat -f houdini`) in the tests of resource probes (docs/guide/resources.md, "Live counts"),
// on every OS: the test binary itself, started with the arguments Fake.Command returns, does
// what the files of its folder say. A package that uses it calls Main first in its TestMain.
package fakeprobe

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// arg is the first argument that makes the test binary the fake instead of the tests.
const arg = "dccflow-fake-lmstat"

// Main runs the fake and exits when the process was started as one (by Fake.Command); it
// returns at once otherwise. Call it first in TestMain, before m.Run parses the test flags.
func Main() {
	if len(os.Args) < 3 || os.Args[1] != arg {
		return
	}
	os.Exit(run(os.Args[2]))
}

// run does what mode in dir says:
//   - "ok": one lmstat line for houdini, 10 licences issued, the file used's number in use;
//   - "fail": "lmgrd is not running" on stderr, exit status 1;
//   - "hang": sleeps ten minutes (the probe's timeout kills it);
//   - "garbage": a line that is not lmstat's;
//   - "flood": about 8 MiB of lmstat lines (the probe's output cap cuts it).
func run(dir string) int {
	mode, err := os.ReadFile(filepath.Join(dir, "mode"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeprobe:", err)
		return 2
	}
	switch string(mode) {
	case "ok":
		used, _ := os.ReadFile(filepath.Join(dir, "used"))
		fmt.Printf("Users of houdini:  (Total of 10 licenses issued;  Total of %s licenses in use)\n", used)
	case "fail":
		fmt.Fprintln(os.Stderr, "lmgrd is not running")
		return 1
	case "hang":
		time.Sleep(10 * time.Minute)
	case "garbage":
		fmt.Println("%%%% not lmstat")
	case "flood":
		line := strings.Repeat("Users of houdini: (Total of 9 licenses issued; Total of 0 licenses in use)\n", 1000)
		for range 100 {
			if _, err := os.Stdout.WriteString(line); err != nil {
				return 1 // the reader stopped reading: the cap
			}
		}
	default:
		fmt.Fprintf(os.Stderr, "fakeprobe: unknown mode %q\n", mode)
		return 2
	}
	return 0
}

// Fake is one fake command: its folder holds its mode and the licences in use.
type Fake struct {
	t   testing.TB
	dir string
}

// New makes a fake in a temporary folder of t, in mode "ok" with 0 licences in use.
func New(t testing.TB) *Fake {
	t.Helper()
	f := &Fake{t: t, dir: t.TempDir()}
	f.Set("ok", 0)
	return f
}

// Command returns the probe command that starts the fake; extra arguments (lmstat's own, say)
// are passed and ignored.
func (f *Fake) Command(extra ...string) []string {
	f.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		f.t.Fatal(err)
	}
	return append([]string{exe, arg, f.dir}, extra...)
}

// Set makes the next runs of the fake behave as mode says (see run), with used licences in use.
func (f *Fake) Set(mode string, used int) {
	f.t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, "used"), []byte(strconv.Itoa(used)), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "mode"), []byte(mode), 0o644); err != nil {
		f.t.Fatal(err)
	}
}
