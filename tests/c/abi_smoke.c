/*
 * tests/c/abi_smoke.c: a C host of dccflow.dll on Windows (run under Wine by
 * scripts/test_windows.sh).
 *
 *   abi_smoke.exe <path of dccflow.dll>
 *
 * Loads the library with LoadLibraryW from a folder whose name has a space, checks
 * dccflow_abi_version against capi/dccflow.h, checks that malformed request JSON is return value
 * 2 (invalid_request), opens an engine on a database in
 * %TEMP%\Some User\dcc flow abi\flow.db, checks that a second engine on it is refused with
 * db_locked, runs a two-step workflow of flow__echo steps (the second reads the first's output)
 * with dccflow_run_submit and dccflow_run_wait, checks the output JSON, closes the engine and
 * reopens it to list the run from the database. Every string the library returns is freed with
 * dccflow_free. Exit status 0 when every check passed; 1 with a message on stderr otherwise.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include "dccflow.h"

typedef uint32_t (*abi_version_fn)(void);
typedef void (*free_fn)(char *);
typedef int32_t (*op_fn)(uint64_t, const char *, char **);

/* The function types of capi/dccflow.h are the ones called through GetProcAddress below. */
_Static_assert(__builtin_types_compatible_p(__typeof__(&dccflow_abi_version), abi_version_fn), "dccflow_abi_version");
_Static_assert(__builtin_types_compatible_p(__typeof__(&dccflow_free), free_fn), "dccflow_free");
_Static_assert(__builtin_types_compatible_p(__typeof__(&dccflow_run_submit), op_fn), "dccflow_run_submit");

static free_fn dfree;
static int failures;

static void fail(const char *what, const char *out) {
	fprintf(stderr, "FAIL: %s%s%s\n", what, out ? ": " : "", out ? out : "");
	failures++;
}

static void *sym(HMODULE lib, const char *name) {
	void *p = (void *)GetProcAddress(lib, name);
	if (p == NULL) {
		fprintf(stderr, "FAIL: dccflow.dll does not export %s (error %lu)\n", name, GetLastError());
		exit(1);
	}
	return p;
}

/* call runs op and returns its output (to be freed with dccflow_free); *rc gets its result. */
static char *call(op_fn op, uint64_t handle, const char *in, int32_t *rc) {
	char *out = NULL;
	*rc = op(handle, in, &out);
	return out;
}

/* json_escape writes s as the inside of a JSON string (backslashes and quotes escaped). */
static void json_escape(char *dst, size_t n, const char *s) {
	size_t j = 0;
	for (; *s && j + 2 < n; s++) {
		if (*s == '\\' || *s == '"') {
			dst[j++] = '\\';
		}
		dst[j++] = *s;
	}
	dst[j] = 0;
}

int main(int argc, char **argv) {
	if (argc != 2 || argv[1][0] == 0) {
		fprintf(stderr, "usage: abi_smoke <path of dccflow.dll> (%s)\n",
			argc == 2 ? "the path was empty" : "expected exactly one argument");
		return 2;
	}
	wchar_t wpath[MAX_PATH];
	if (MultiByteToWideChar(CP_UTF8, 0, argv[1], -1, wpath, MAX_PATH) == 0) {
		fprintf(stderr, "FAIL: bad library path %s\n", argv[1]);
		return 1;
	}
	HMODULE lib = LoadLibraryW(wpath);
	if (lib == NULL) {
		fprintf(stderr, "FAIL: LoadLibrary(%s): error %lu\n", argv[1], GetLastError());
		return 1;
	}
	abi_version_fn abi_version = (abi_version_fn)sym(lib, "dccflow_abi_version");
	dfree = (free_fn)sym(lib, "dccflow_free");
	op_fn version = (op_fn)sym(lib, "dccflow_version");
	op_fn spec_parse = (op_fn)sym(lib, "dccflow_spec_parse");
	op_fn engine_open = (op_fn)sym(lib, "dccflow_engine_open");
	op_fn engine_close = (op_fn)sym(lib, "dccflow_engine_close");
	op_fn run_submit = (op_fn)sym(lib, "dccflow_run_submit");
	op_fn run_wait = (op_fn)sym(lib, "dccflow_run_wait");
	op_fn runs_list = (op_fn)sym(lib, "dccflow_runs_list");

	uint32_t abi = abi_version();
	if (abi != DCCFLOW_ABI_VERSION) {
		fprintf(stderr, "FAIL: dccflow_abi_version() = %u; dccflow.h says %d\n", abi, DCCFLOW_ABI_VERSION);
		return 1;
	}
	printf("loaded %s: ABI version %u\n", argv[1], abi);

	int32_t rc;
	char *out = call(version, 0, NULL, &rc);
	if (rc != 0 || out == NULL || strstr(out, "\"abi_version\":2") == NULL) {
		fail("dccflow_version", out);
	} else {
		printf("dccflow_version: %s\n", out);
	}
	dfree(out);

	out = call(spec_parse, 0, "{not json", &rc);
	if (rc != 2 || out == NULL || strstr(out, "\"invalid_request\"") == NULL) {
		fail("malformed JSON is not return value 2 with code invalid_request", out);
	}
	dfree(out);

	/* The database: %TEMP%\Some User\dcc flow abi\flow.db (a drive letter, spaces). */
	char dir[MAX_PATH], db[MAX_PATH], esc[2 * MAX_PATH], in[4 * MAX_PATH];
	DWORD n = GetTempPathA(MAX_PATH, dir);
	if (n == 0 || n > MAX_PATH - 40) {
		fprintf(stderr, "FAIL: GetTempPath\n");
		return 1;
	}
	strcat(dir, "Some User");
	CreateDirectoryA(dir, NULL);
	strcat(dir, "\\dcc flow abi");
	CreateDirectoryA(dir, NULL);
	snprintf(db, sizeof db, "%s\\flow.db", dir);
	DeleteFileA(db);
	json_escape(esc, sizeof esc, db);
	snprintf(in, sizeof in, "{\"config\": {\"db\": \"%s\"}}", esc);

	out = call(engine_open, 0, in, &rc);
	uint64_t h = 0;
	const char *hp = out ? strstr(out, "\"handle\":") : NULL;
	if (rc != 0 || hp == NULL || (h = strtoull(hp + 9, NULL, 10)) == 0) {
		fail("dccflow_engine_open", out);
		dfree(out);
		return 1;
	}
	printf("engine %llu on %s\n", (unsigned long long)h, db);
	dfree(out);

	out = call(engine_open, 0, in, &rc);
	if (rc != 1 || out == NULL || strstr(out, "\"db_locked\"") == NULL) {
		fail("a second engine on the database is not refused with db_locked", out);
	} else {
		printf("second engine refused: %s\n", out);
	}
	dfree(out);

	const char *submit =
		"{\"spec\": \"name: abi_smoke\\nsteps:\\n"
		"  - {id: a, tool: flow__echo, args: {shot: sh010, frames: 48}}\\n"
		"  - {id: b, tool: flow__echo, args: {from_a: '{{steps.a.output.shot}}'}}\\n\", \"inputs\": {}}";
	out = call(run_submit, h, submit, &rc);
	char run_id[128] = {0};
	const char *rp = out ? strstr(out, "\"run_id\":\"") : NULL;
	if (rc != 0 || rp == NULL || sscanf(rp + 10, "%127[^\"]", run_id) != 1) {
		fail("dccflow_run_submit", out);
	} else {
		printf("submitted %s\n", run_id);
	}
	dfree(out);

	if (run_id[0]) {
		snprintf(in, sizeof in, "{\"run_id\": \"%s\", \"timeout_ms\": 20000}", run_id);
		out = call(run_wait, h, in, &rc);
		if (rc != 0 || out == NULL || strstr(out, "\"status\":\"completed\"") == NULL ||
		    strstr(out, "\"from_a\":\"sh010\"") == NULL || strstr(out, "\"frames\":48") == NULL) {
			fail("dccflow_run_wait: not completed with the echoed outputs", out);
		} else {
			printf("run_wait: %s\n", out);
		}
		dfree(out);
	}

	out = call(engine_close, h, NULL, &rc);
	if (rc != 0) {
		fail("dccflow_engine_close", out);
	}
	dfree(out);

	/* Reopened, the engine lists the run from the database. */
	snprintf(in, sizeof in, "{\"config\": {\"db\": \"%s\"}}", esc);
	out = call(engine_open, 0, in, &rc);
	hp = out ? strstr(out, "\"handle\":") : NULL;
	if (rc != 0 || hp == NULL || (h = strtoull(hp + 9, NULL, 10)) == 0) {
		fail("dccflow_engine_open after close", out);
		dfree(out);
		return 1;
	}
	dfree(out);
	out = call(runs_list, h, "{}", &rc);
	if (rc != 0 || out == NULL || run_id[0] == 0 || strstr(out, run_id) == NULL) {
		fail("dccflow_runs_list after reopening: the run is not there", out);
	} else {
		printf("runs_list after reopening lists %s\n", run_id);
	}
	dfree(out);
	out = call(engine_close, h, NULL, &rc);
	dfree(out);
	dfree(NULL); /* ignored, as documented */

	if (failures) {
		fprintf(stderr, "abi_smoke: %d check(s) failed\n", failures);
		return 1;
	}
	printf("abi_smoke: ok\n");
	return 0;
}
