// Package flowtype is the public vocabulary of the engine's Go API: the value types and small
// interfaces that callers outside engine/ build, receive or implement — tool results and errors,
// host tool calls, the clock, approvals, why a run failed, schedules and the problems of a
// document. It is a leaf, like River's rivertype: it imports the standard library and
// engine/run only, and the internal packages import it, so every type here is defined in public
// and the internal code uses the public definition (often under a local alias, e.g. tools.Result
// = flowtype.ToolResult). engine/imports_test.go checks that it imports no internal package.
//
// engine/run keeps what describes a run's record (statuses, events, error codes and kinds);
// this package holds the rest of the vocabulary, so that run stays about runs and a caller that
// only reads events does not see tools, clocks or schedules.
package flowtype
