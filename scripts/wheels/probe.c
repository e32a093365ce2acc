/* wheel probe: loads a built dcc-flow library at run time and runs one workflow through the C ABI
 * (docs/reference/c-abi/README.md), for the wheels that cannot be tried with a Python of their platform here
 * (make test-wheels runs it for manylinux2014_aarch64 under qemu-aarch64).
 *
 *   probe LIBRARY DBPATH
 *
 * It checks dccflow_abi_version, dccflow_version, then opens an engine on the SQLite database DBPATH,
 * registers a host tool, submits a one-step workflow, answers the tool call it pulls with an output,
 * waits for the run and expects "completed". Prints "probe ok: ..." and exits 0, or names the
 * failing call with the library's answer and exits 1. Plain C99 with dlopen (LoadLibrary on Windows).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#define OPEN_LIB(p) ((void *)LoadLibraryA(p))
#define SYM(h, n) ((void *)GetProcAddress((HMODULE)(h), n))
#else
#include <dlfcn.h>
#define OPEN_LIB(p) dlopen(p, RTLD_NOW | RTLD_LOCAL)
#define SYM(h, n) dlsym(h, n)
#endif

typedef uint32_t (*abi_fn)(void);
typedef void (*free_fn)(char *);
typedef int32_t (*json_fn)(uint64_t, const char *, char **);

static void *lib;
static free_fn dfree;

static json_fn sym(const char *name) {
	json_fn f = (json_fn)SYM(lib, name);
	if (!f) {
		printf("probe FAILED: the library does not export %s\n", name);
		exit(1);
	}
	return f;
}

/* call runs one JSON export and returns its answer (malloc'd); a non-zero return code fails. */
static char *call(const char *name, uint64_t handle, const char *in) {
	char *out = NULL;
	int32_t rc = sym(name)(handle, in, &out);
	const char *text = out ? out : "";
	char *copy = malloc(strlen(text) + 1);
	strcpy(copy, text);
	if (out) dfree(out);
	if (rc != 0) {
		printf("probe FAILED: %s(%s) returned %d: %s\n", name, in, (int)rc, copy);
		exit(1);
	}
	return copy;
}

/* field copies the string value of "key":"..." from a compact JSON answer (no escapes expected). */
static char *field(const char *json, const char *key) {
	char pat[64];
	snprintf(pat, sizeof pat, "\"%s\":\"", key);
	const char *p = strstr(json, pat);
	if (!p) return NULL;
	p += strlen(pat);
	const char *end = strchr(p, '"');
	if (!end) return NULL;
	char *v = malloc((size_t)(end - p) + 1);
	memcpy(v, p, (size_t)(end - p));
	v[end - p] = 0;
	return v;
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: probe LIBRARY DBPATH\n");
		return 2;
	}
	lib = OPEN_LIB(argv[1]);
	if (!lib) {
#ifdef _WIN32
		printf("probe FAILED: cannot load %s (error %lu)\n", argv[1], (unsigned long)GetLastError());
#else
		printf("probe FAILED: cannot load %s: %s\n", argv[1], dlerror());
#endif
		return 1;
	}
	abi_fn abi = (abi_fn)SYM(lib, "dccflow_abi_version");
	dfree = (free_fn)SYM(lib, "dccflow_free");
	if (!abi || !dfree) {
		printf("probe FAILED: dccflow_abi_version or dccflow_free missing\n");
		return 1;
	}
	uint32_t version = abi();
	char *info = call("dccflow_version", 0, "{}");

	char in[1024];
	snprintf(in, sizeof in, "{\"config\":{\"db\":\"%s\"}}", argv[2]);
	char *opened = call("dccflow_engine_open", 0, in);
	char *h = strstr(opened, "\"handle\":");
	if (!h) {
		printf("probe FAILED: engine_open answered %s\n", opened);
		return 1;
	}
	uint64_t handle = strtoull(h + 9, NULL, 10);
	free(call("dccflow_tool_register", handle, "{\"name\":\"probe__echo\",\"lane\":\"main\",\"max_concurrent\":null}"));
	char *submitted = call("dccflow_run_submit", handle,
		"{\"spec\":\"name: probe\\nsteps:\\n  - id: echo\\n    tool: probe__echo\\n    args: { word: hello }\\n\",\"inputs\":{}}");
	char *run_id = field(submitted, "run_id");
	if (!run_id) {
		printf("probe FAILED: run_submit answered %s\n", submitted);
		return 1;
	}
	uint64_t call_id = 0;
	for (int i = 0; i < 100 && !call_id; i++) {
		char *next = call("dccflow_calls_next", handle, "{\"lanes\":[\"main\"],\"max\":1,\"timeout_ms\":100}");
		char *id = strstr(next, "\"call_id\":");
		call_id = id ? strtoull(id + 10, NULL, 10) : 0;
		if (call_id && !strstr(next, "\"word\":\"hello\"")) {
			printf("probe FAILED: the call lacks its args: %s\n", next);
			return 1;
		}
		free(next);
	}
	if (!call_id) {
		printf("probe FAILED: no tool call within 10 s\n");
		return 1;
	}
	snprintf(in, sizeof in, "{\"call_id\":%llu,\"output\":{\"said\":\"hello\"}}", (unsigned long long)call_id);
	char *done = call("dccflow_calls_complete", handle, in);
	if (!strstr(done, "\"accepted\":true")) {
		printf("probe FAILED: calls_complete answered %s\n", done);
		return 1;
	}
	snprintf(in, sizeof in, "{\"run_id\":\"%s\",\"timeout_ms\":10000}", run_id);
	char *run = call("dccflow_run_wait", handle, in);
	char *status = field(run, "status");
	if (!status || strcmp(status, "completed") != 0) {
		printf("probe FAILED: the run ended %s\n", run);
		return 1;
	}
	free(call("dccflow_engine_close", handle, "{}"));
	printf("probe ok: abi %u, %s, run %s completed\n", (unsigned)version, info, run_id);
	return 0;
}
