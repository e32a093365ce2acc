/* dccflow.h — the C ABI of dcc-flow (libdccflow). See docs/reference/c-abi/README.md.
 *
 * Every function except dccflow_abi_version and dccflow_free takes an engine handle (0 when none is
 * needed), a NUL-terminated UTF-8 JSON request owned by the caller (NULL means "{}"), and stores in
 * *out_json a NUL-terminated UTF-8 JSON document owned by the library, to be released with
 * dccflow_free. Return value: 0 = ok (*out_json is the result); 1 = error (*out_json is
 * {"code","message",...}); 2 = the request JSON was invalid; 3 = internal error (recovered panic).
 * All functions are thread-safe.
 */
#ifndef DCCFLOW_H
#define DCCFLOW_H

#include <stdint.h>

#define DCCFLOW_ABI_VERSION 2

#ifdef __cplusplus
extern "C" {
#endif

uint32_t dccflow_abi_version(void);
void dccflow_free(char *p);

int32_t dccflow_version(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_spec_parse(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_spec_validate(uint64_t handle, const char *in_json, char **out_json);

/* Engines: open returns {"handle": n}; every other call takes that handle. */
int32_t dccflow_engine_open(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_engine_close(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_tool_register(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_workflow_register(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_workflows_list(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_run_submit(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_run_dry(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_run_status(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_run_wait(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_run_cancel(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_run_approve(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_run_pause(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_run_unpause(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_run_resume(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_runs_list(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_pools_list(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_runs_prune(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_calls_next(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_calls_complete(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_call_cancelled(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_call_report(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_puller_open(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_puller_close(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_calls_release(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_events_next(uint64_t handle, const char *in_json, char **out_json);

/* Schedules (handle 0): parse a schedules file, validate a list of schedules. */
int32_t dccflow_schedules_parse(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_schedules_validate(uint64_t handle, const char *in_json, char **out_json);

/* An engine's schedules and servers (scheduler, webhooks). */
int32_t dccflow_schedule_add(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_schedule_remove(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_schedules_list(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_serve_start(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_serve_stop(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_serve_status(uint64_t handle, const char *in_json, char **out_json);

/* Retention and history: purge expired idempotency entries, the retention serve applies, the
 * fire history of schedules (dccflow_runs_prune, above, deletes ended runs). */
int32_t dccflow_idempotency_purge(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_retention_status(uint64_t handle, const char *in_json, char **out_json);
int32_t dccflow_schedule_fires(uint64_t handle, const char *in_json, char **out_json);

#ifdef __cplusplus
}
#endif

#endif /* DCCFLOW_H */
