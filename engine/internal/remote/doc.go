// Package remote calls tools on other MCP servers for `tool_remote` steps, with
// mark3labs/mcp-go's client over streamable HTTP or stdio (a child process).
//
// A [Pool] holds one connection per configured remote, made on first use and reused by every
// later call (concurrent calls share it); a remote with pool fields is a pool of worker
// processes, and one whose URLs are a list a pool of servers, each worker serving one call at a
// time (workers.go, docs/guide/pools.md). A pool worker's call output (what its tool printed) comes
// back in the Result's Logs, from the call's result or, when the worker died during the call,
// from the capture files the pool gave it (OutputDirEnv). Calls report every failure as a [Result] with an
// error kind from engine/run, so the executor can retry by kind:
//
//   - the tool's own error (isError): the "kind" field of its structured result, or "error";
//   - a broken or unreachable connection: "transient" (the next call reconnects); in a pool, a
//     worker process that died during the call, or a server that could not be reached or
//     dropped the call: "worker_lost" (the retry goes to another worker or member);
//   - the per-call timeout or the caller's deadline: "timeout"; the caller's cancellation:
//     "cancelled";
//   - JSON-RPC "method not found" or an unknown tool: "not_found"; other invalid params:
//     "invalid_input"; other JSON-RPC errors: "error"; an answer that is not a valid MCP tool
//     result: "invalid_output";
//   - a message from the remote over run.MaxMessageBytes (64 MiB: a stdio line, an HTTP body,
//     an SSE event), which is never read whole (frames.go): "too_large"; a stdio child that
//     wrote it is killed (a pool counts it lost and replaces it), a pool member's session ended;
//   - HTTP 401/403 or an unset token_env variable: "permission"; a program that cannot be
//     started, a server speaking only the old HTTP+SSE transport, or an unsupported
//     protocol version: "fatal".
//
// When a call's context ends before the answer, the remote receives notifications/cancelled
// for the request: over stdio mcp-go's client sends it, and for a pool worker this package
// sends it again at doubling intervals while the request is unanswered (settle.go); over HTTP
// this package does (mcp-go only aborts the HTTP request there).
//
// A stdio child starts in a process group of its own (a job object on Windows), killed with it
// (process.kill) and as soon as it exits, so what it forked does not outlive it.
//
// The package installs no signal handlers and does not write to stdout. A child's stderr is
// kept (its last 4 KiB) for error messages. The one thing it cannot silence is mcp-go's stdio
// transport, which logs rare I/O errors (a write to a child that has just died) through
// slog.Default; the host decides where that goes.
package remote
