# dcc-flow — make targets. `make` alone prints this help.
SHELL        := /bin/bash
GO           ?= go
PYTHON       ?= python3
VENV         := .venv
VPY          := $(VENV)/bin/python
LIBDIR       := python/dcc_flow/_lib
LIB          := $(LIBDIR)/libdccflow.so
GO_SOURCES   := $(shell find engine capi -name '*.go' -not -name '*_test.go' 2>/dev/null) go.mod go.sum \
                $(shell find engine/ui/assets -type f 2>/dev/null)
FUZZTIME     ?= 60s
GOTESTFLAGS  ?=
GOTAGS       := dccflow_cabitest
SETUPTOOLS   := setuptools==80.9.0
# The OpenLineage Python client: its model of the spec checks the events the engine writes
# (tests/py/test_openlineage_events.py; engine/internal/openlineage/testdata/README.md). Python 3.10+.
OPENLINEAGE  := openlineage-python==1.54.0
# pytest-xdist runs tests/py on PYTEST_WORKERS processes (test-py): a test extra, not the package's.
PYTEST_XDIST := pytest-xdist==3.8.0
# Real DCC hosts for tests/py/test_dcc_{blender,qt}.py and scripts/bench_qt.py. bpy has wheels for
# Python 3.11 only: elsewhere it is left out and those tests skip, naming it (tests/py/_real_dcc.py).
BPY          := bpy==5.0.1
PYSIDE       := PySide6-Essentials==6.11.3
# Pixar's USD for examples/usd_shot.yaml and tests/py/test_example_usd_shot.py (wheels for Python
# 3.9-3.13; elsewhere those tests skip, naming usd-core).
USD          := usd-core==26.11
# Go tools that lint needs, installed on first use by go install (pinned) into .tools/<name>-<version>/.
TOOLS        := .tools
STATICCHECK_VERSION := v0.8.2
STATICCHECK  := $(TOOLS)/staticcheck-$(STATICCHECK_VERSION)/staticcheck
SOAK_SECS    ?= 600
SOAK_SEED    ?= 1
SOAK_FILES   := scripts/soak.py scripts/soak/soak_checks.py scripts/soak/soak_mcp.py scripts/soak/soak_tools.py scripts/soak/soak_ui.py scripts/soak_net.py scripts/soak_cluster.py scripts/soak/soak_pg.py scripts/soak/soak_cluster_tools.py

.DEFAULT_GOAL := help
.PHONY: otelcol test-otelcol wheels test-wheels wheel-tools help lib generate test test-long test-go test-go-long test-race checks test-py test-py-long test-node smoke vet lint fuzz bench bench-scale demo clean venv soak soak-short soaks-short test-go-beside redteam soak-net-short soak-cluster soak-cluster-short bench-resources

help: ## Show this help
	@echo "dcc-flow — workflow engine for DCC studios"
	@echo
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  make %-10s %s\n", $$1, $$2}'

lib: $(LIB) ## Build the native library python/dcc_flow/_lib/libdccflow.so

$(LIB): $(GO_SOURCES)
	@mkdir -p $(LIBDIR)
	$(TIMED) lib $(GO) build -trimpath -ldflags="-s -w" -buildmode=c-shared -o $@ ./capi
	@scripts/check_header.sh $(LIBDIR)/libdccflow.h || { rm -f $@; exit 1; }
	@rm -f $(LIBDIR)/libdccflow.h

generate: ## Write the C ABI's exports (capi/exports_gen.go), capi/dccflow.h and python/dcc_flow/_ffi_table.py from capi/internal/gen/table.go
	$(GO) generate ./capi/...

# The package's bytecode, compiled once for $(PYTHON) (the venv's interpreter): make test starts
# hundreds of Python processes that import dcc_flow (the CLI in tests, workers, soaks), and where
# PYTHONDONTWRITEBYTECODE is set (this project's CI machines) or on a fresh clone each compiled the
# whole package again: `python -m dcc_flow --version` took 0.25 s of CPU, 0.12 s with the bytecode.
# Stale bytecode is never used (Python checks each source's size and time).
PY_SOURCES := $(shell find python/dcc_flow -name '*.py' 2>/dev/null)
PYC        := build/pyc.ok
$(PYC): $(PY_SOURCES)
	@mkdir -p $(dir $@)
	$(PYTHON) -m compileall -q python/dcc_flow
	@touch $@

venv: $(VENV)/.ok ## Create the project venv (.venv) with the test extras

$(VENV)/.ok: pyproject.toml Makefile
	@scripts/timed.sh begin venv
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --disable-pip-version-check pytest $(PYTEST_XDIST) mypy==2.4.1 ruff==0.17.6 $(SETUPTOOLS)
	$(VPY) -m pip download --quiet --disable-pip-version-check --no-deps -d $(VENV)/wheelhouse $(SETUPTOOLS)
	$(VPY) -m pip install --quiet --disable-pip-version-check --only-binary=:all: $(PYSIDE) \
		|| echo "note: no $(PYSIDE) wheel for this Python/platform: the real-Qt tests skip, naming PySide6"
	$(VPY) -m pip install --quiet --disable-pip-version-check --only-binary=:all: $(USD) \
		|| echo "note: no $(USD) wheel for this Python/platform: the USD example's tests skip, naming usd-core"
	$(VPY) -m pip install --quiet --disable-pip-version-check --only-binary=:all: $(BPY) \
		|| echo "note: no $(BPY) wheel for this Python/platform (Python 3.11 only): the real-Blender tests skip, naming bpy"
	$(VPY) -m pip install --quiet --disable-pip-version-check $(OPENLINEAGE) \
		|| echo "note: $(OPENLINEAGE) needs Python 3.10+: tests/py/test_openlineage_events.py skips, naming it"
	@scripts/timed.sh end venv
	@touch $@

vet: ## go vet
	$(GO) vet -tags $(GOTAGS) ./...

# make test runs the Go tests beside the two short soaks, the Node interop and the smoke test, each
# as soon as what it needs is built (test-go-beside: the Go tests once the library is built, while
# pip still fills the venv; go test uses about one of the two cores, waiting on PostgreSQL,
# subprocesses and leases, the soaks two thirds of one for a fixed 60 s; the soaks check counts and
# bounds of their own server's memory, not times); then pytest alone (it keeps both cores busy on
# its own). The static checks (make checks) and the Go tests under the race detector (make
# test-race) are in make test-long: on a cold two-core machine their compiles alone (the race
# build of every package and of modernc.org/sqlite, staticcheck, vet's facts of every dependency)
# cost some 400 s of CPU, and make test with them took 500 s (docs/design/architecture.md).
# Each part's wall-clock time is logged (scripts/timed.sh, build/test-times.log) and printed at the
# end, also when a part fails.
TIMED := scripts/timed.sh run
test: ## The check to run before every commit (under 6 minutes on a cold two-core machine): Go tests beside a 60 s soak, a 30 s network soak, MCP interop (Node) and the 3.7–3.13 smoke test, then pytest
	@scripts/timed.sh reset
	@$(TIMED) test-go-beside $(MAKE) --no-print-directory test-go-beside || { scripts/timed.sh show; exit 1; }
	@$(TIMED) test-py $(MAKE) --no-print-directory test-py || { scripts/timed.sh show; exit 1; }
	@scripts/timed.sh show
	@echo "make test passed; make test-long runs the rest of what CI runs (the static checks, the Go tests under the race detector, the wheels of every OS, the cluster soak)"

# --output-sync=line: each line whole, the targets' lines interleaved (go test prints a line a package).
# The library, the venv (pip, mostly unpacking wheels) and staticcheck are built side by side as the
# parts' prerequisites (the Go compiler: about 70 s and 30 s on a cold build cache).
test-go-beside: ## test-go beside soak-short, soak-net-short, test-node and smoke, each once its prerequisites are built (make test's first step)
	@$(MAKE) --no-print-directory -j5 --output-sync=line test-go soak-short soak-net-short test-node smoke

test-long: checks test-race test-go-long test-py-long test-otelcol soak-cluster-short test-wheels ## The long tail CI runs after make test: the static checks, the Go tests under the race detector and GO_LONG_TESTS, the wheel tests of tests/py, a run's trace through a real OpenTelemetry Collector, a 60 s cluster soak on PostgreSQL, the wheels of every OS (Windows under Wine)

# The trace test against a real receiver (docs/guide/tracing.md): an OpenTelemetry Collector built from
# its Go modules in its own module (tests/otelcol/go.mod, so the engine's go.mod does not grow; a few
# minutes on a cold build cache), and a Python with the OpenTelemetry SDK for the pool worker's own spans.
OTELCOL      := build/otelcol/dccflow-otelcol
OTEL_VENV    := build/otel-venv
OTEL_PY_PKGS := opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2

otelcol: $(OTELCOL) ## Build the OpenTelemetry Collector of the trace test (tests/otelcol: OTLP receiver, file exporter)

$(OTELCOL): tests/otelcol/main.go tests/otelcol/go.mod tests/otelcol/go.sum
	@mkdir -p $(dir $@)
	cd tests/otelcol && $(GO) build -trimpath -o $(CURDIR)/$@ .

$(OTEL_VENV)/.ok: Makefile
	$(PYTHON) -m venv $(OTEL_VENV)
	$(OTEL_VENV)/bin/pip install --quiet --disable-pip-version-check $(OTEL_PY_PKGS)
	@touch $@

test-otelcol: $(LIB) venv $(OTELCOL) $(OTEL_VENV)/.ok ## A run's trace through the real collector: run → attempt → call → a pool worker tool's own span (part of make test-long)
	DCCFLOW_OTELCOL=$(OTELCOL) DCCFLOW_OTEL_PYTHON=$(OTEL_VENV)/bin/python $(VPY) -m pytest -q -p no:cacheprovider tests/otelcol

# Tests whose cost is volume pushed through SQLite (modernc.org/sqlite is C translated to Go, so the
# race detector instruments the whole database engine: 20-50x slower, 240 s for the attempt flood)
# or through a parser or an expression evaluator (thousands of names, a 511-deep JSONPath chain),
# and that check bounds (rows kept, memory, CPU, page times, scaling), not
# concurrency. test-race skips them (test-go, without -race, runs them); the same code paths at
# small sizes, and every concurrent path, stay under -race. A name here that no longer matches only
# makes that test run under -race again (slower, nothing lost).
GO_NORACE_TESTS := ^(TestRedteamAttemptFlood|TestAssetsScale|TestRunPageOfA10kForeach|TestRunsPageStaysFastWith10kRuns|TestEventsAreCoalesced|TestDashboardMemoryStaysFlat|TestFinishedRunsCostNoMemory|TestRedteamAttemptsRetryLoop|TestPruneFreesPagesAndVacuumShrinksTheFile|TestParseAndValidateScaleLinearly|TestExerciseVolume|TestWALRestartsUnderSteadyWrites|TestRedteamRefusedFiresBounded|TestRedteamChainedDescendantsStopAtTheLimit|TestManyUnknownNamesAreAllReported|TestRedteamCheckResourcesManyUnknownNames|TestRedteamAttemptArgs10MB)$$

# GO_TEST_P packages are built and tested at once (go test -p; its default is the number of cores):
# most of their time is spent waiting on PostgreSQL, subprocesses, sockets and leases, so 4 on two
# cores took 124 s where the default took 159 s (6: 118 s).
GO_TEST_P ?= 4

# The packages whose tests take longest (seconds under -race on a loaded two-core machine: tests/go
# 106, postgres 88, engine 50, ui 47, remote 46, mcpserver 44, sqlite 32), named first so that
# go test starts them first: it starts packages in the order given, and ./... put tests/go
# nearly last, where its 106 s were the whole run's tail. A package named twice runs once.
GO_TEST_FIRST := ./tests/go ./engine/internal/store/postgres ./engine ./engine/ui ./engine/internal/remote ./engine/mcpserver ./engine/internal/store/sqlite

# -vet=off: make checks runs the whole go vet (go test's vet is a subset of it, and computed vet
# facts of every dependency, modernc.org/sqlite's 17 MB of Go included: 48 s of CPU on a cold cache).
# Hostile-input tests of volume alone (a 10 GB sparse file hashed: 44 s of one core; 100,000 files
# globbed: 16 s), which the race detector, -short and Wine skip: make test skips them too (the
# same paths run at 64 MiB and 11 files), make test-long and make redteam run them.
GO_LONG_TESTS := ^(TestRedteam10GBSparseFile|TestRedteamExpand100kFiles)$$
GO_LONG_PKGS  := ./engine/internal/filehash

test-go: $(LIB) $(PYC) ## Go tests without the race detector (make test-race) or GO_LONG_TESTS (make test-go-long); a few start a real dcc-flow worker, which needs the library
	$(TIMED) test-go $(GO) test -vet=off -count=1 -p $(GO_TEST_P) -tags $(GOTAGS) -skip '$(GO_LONG_TESTS)' $(GOTESTFLAGS) $(GO_TEST_FIRST) ./...

test-go-long: ## The Go tests of GO_LONG_TESTS (part of make test-long)
	$(TIMED) test-go-long $(GO) test -vet=off -count=1 -tags $(GOTAGS) -run '$(GO_LONG_TESTS)' $(GOTESTFLAGS) $(GO_LONG_PKGS)

test-race: $(LIB) $(PYC) ## Go tests under the race detector, but the volume tests of GO_NORACE_TESTS (test-go runs them); part of make test-long
	$(TIMED) test-race $(GO) test -vet=off -race -count=1 -p $(GO_TEST_P) -tags $(GOTAGS) -skip '$(GO_NORACE_TESTS)' $(GOTESTFLAGS) $(GO_TEST_FIRST) ./...

$(STATICCHECK):
	$(TIMED) staticcheck env GOBIN=$(CURDIR)/$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# lint's parts are independent targets, so that make -j runs them side by side (make checks does,
# with vet). The two mypy runs keep separate caches: one
# cache written by two mypy processes with other search paths would be rebuilt by each in turn.
LINT_PARTS := lint-gofmt lint-staticcheck lint-staticcheck-tags lint-mypy lint-ruff lint-mypy-soak
.PHONY: $(LINT_PARTS)

lint: $(LINT_PARTS) ## gofmt check, staticcheck (with and without the test tags), mypy --strict and ruff on the Python package and the soak scripts (make -j2 lint: side by side)

lint-gofmt:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt would change:"; gofmt -l $$(git ls-files '*.go'); exit 1; }

lint-staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

lint-staticcheck-tags: $(STATICCHECK)
	$(STATICCHECK) -tags $(GOTAGS) ./...

lint-mypy: venv
	$(VPY) -m mypy python/dcc_flow

lint-ruff: venv
	$(VENV)/bin/ruff check python tests/py tests/otelcol examples setup.py $(SOAK_FILES) scripts/wheels

lint-mypy-soak: venv
	MYPYPATH=python:scripts/soak $(VPY) -m mypy --strict --cache-dir .mypy_cache/soak $(SOAK_FILES)

# vet and lint's parts, CHECK_JOBS at a time (part of make test-long; run it before a commit too).
CHECK_JOBS ?= 2
checks: venv $(STATICCHECK) ## The static checks: go vet, gofmt, staticcheck (with and without the test tags), mypy and ruff, CHECK_JOBS (2) at a time
	@$(TIMED) checks $(MAKE) --no-print-directory -j$(CHECK_JOBS) --output-sync=target vet $(LINT_PARTS)

# tests/py/test_wheel.py builds the package's wheel in the tree (pip wheel ., setup.py's build/)
# and installs it into fresh venvs: it belongs with the wheels, in make test-long.
PY_LONG_TESTS := tests/py/test_wheel.py

# Most of tests/py waits on subprocesses, sockets and timers, so test-py runs it on more pytest-xdist
# workers than a two-core machine has cores (docs/design/architecture.md, "Layers and packages": 4 was the fastest).
# Tests that must not run beside one another share an xdist_group mark (--dist loadgroup runs a group on
# one worker). PYTEST_WORKERS=0 runs the suite in this process, in file order.
PYTEST_WORKERS ?= 4

# Tests marked scale are timed scenarios at 10,000 runs or items (the dashboard's stall and first
# page): beside other xdist workers their figures measure the workers' load (a 10,000-item foreach's
# page stalled 1.8 s beside three of them), so make test-long runs them alone.
test-py: $(LIB) venv $(PYC) ## pytest in .venv on PYTEST_WORKERS (default 4) pytest-xdist workers (but for PY_LONG_TESTS and the scale tests, which make test-long runs)
	$(TIMED) pytest $(VPY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 -m "not scale" tests/py $(addprefix --ignore=,$(PY_LONG_TESTS))

test-py-long: $(LIB) venv ## The wheel tests and the scale tests of tests/py, in one process (part of make test-long)
	$(VPY) -m pytest -q $(PY_LONG_TESTS)
	$(VPY) -m pytest -q -m scale tests/py $(addprefix --ignore=,$(PY_LONG_TESTS))

.PHONY: screenshots
screenshots: $(LIB) venv ## Rewrite the web UI's screenshots in docs/guide/ui/ (headless Chromium: tests/py/test_ui_browser.py, test_ui_assets.py)
	UPDATE_SCREENSHOTS=1 $(VPY) -m pytest -q tests/py/test_ui_browser.py tests/py/test_ui_assets.py -k screenshots

test-node: ## MCP interop with the official TypeScript SDK client (npm ci, then node --test)
	$(TIMED) npm-ci npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
	$(TIMED) test-node node --test tests/node/

DEMO_DB      := .dcc-flow/demo.db
DCCFLOW      := PYTHONPATH=python VENDOR_INTAKE_ROOT=.dcc-flow/vendor_intake $(PYTHON) -m dcc_flow

demo: $(LIB) ## Run examples/vendor_intake end to end with progress, then the run history and the step timeline
	@rm -rf .dcc-flow/vendor_intake
	$(DCCFLOW) run examples/vendor_intake.yaml --tools examples/vendor_intake_tools.py --input date=2026-11-22 \
		--worker-threads 2 --approve-all --db $(DEMO_DB)
	@echo
	$(DCCFLOW) runs --limit 5 --db $(DEMO_DB)
	@echo
	$(DCCFLOW) show last --db $(DEMO_DB)
	@echo
	@echo "The exports are in .dcc-flow/vendor_intake/fbx; the run history in $(DEMO_DB)."

smoke: $(LIB) $(PYC) ## Run tests/py/smoke.py under every Python 3.7–3.13 found (pyenv)
	@$(TIMED) smoke scripts/smoke-all.sh

soak: $(LIB) venv ## Soak test of serve (issue #16): load, SIGKILLs, then checks; SOAK_SECS (default 600), SOAK_SEED
	$(VPY) scripts/soak.py --duration $(SOAK_SECS) --seed $(SOAK_SEED)

soaks-short: $(LIB) venv ## soak-short and soak-net-short side by side (part of make test: 72 s where one after the other took 128 s)
	@$(MAKE) --no-print-directory -j2 --output-sync=target soak-short soak-net-short

soak-short: $(LIB) venv $(PYC) ## The soak test for 60 s (part of make test, through soaks-short)
	$(TIMED) soak-short $(VPY) scripts/soak.py --duration 60 --seed $(SOAK_SEED)

soak-cluster: $(LIB) venv ## Soak test of three serve engines and two workers on one throwaway PostgreSQL: load, SIGKILLs, pg_ctl restarts, a SIGSTOP past the lease, then checks; SOAK_SECS (default 600), SOAK_SEED
	$(VPY) scripts/soak_cluster.py --duration $(SOAK_SECS) --seed $(SOAK_SEED)

soak-cluster-short: $(LIB) venv ## The cluster soak for 60 s (part of make test-long; about 75 s with the cluster start and the checks, 160 s at most: a watchdog)
	$(VPY) scripts/soak_cluster.py --duration 60 --seed $(SOAK_SEED)

fuzz: ## Run every Go fuzz target for FUZZTIME (default 60s) each
	@scripts/fuzz-all.sh $(FUZZTIME)

# The two Dasks dcc-flow is measured beside (scripts/bench_dask.py): the current release, and the
# oldest one still in a supported Linux distribution (Debian 12 bookworm's python3-dask), each in
# a venv of its own (two Dasks cannot share a process).
BENCH_VENV   := .venv-bench
DASK         := dask==2026.8.0
BENCH_VENV_OLD := .venv-bench-old
DASK_OLD     := dask==2022.12.1

$(BENCH_VENV)/.ok: Makefile
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --disable-pip-version-check $(DASK)
	@touch $@

$(BENCH_VENV_OLD)/.ok: Makefile
	$(PYTHON) -m venv $(BENCH_VENV_OLD)
	$(BENCH_VENV_OLD)/bin/pip install --quiet --disable-pip-version-check $(DASK_OLD)
	@touch $@

bench: $(LIB) $(BENCH_VENV)/.ok $(BENCH_VENV_OLD)/.ok venv ## Run the benchmarks and print the figures table (two Dasks side by side, the Qt UI stall), then the scale table
	@BENCH_DASK_PYTHONS=$(BENCH_VENV)/bin/python:$(BENCH_VENV_OLD)/bin/python QT_PYTHON=$(VPY) scripts/bench.sh
	@$(PYTHON) scripts/bench_scale.py

redteam: $(LIB) venv ## Replay the hostile-input and fault regressions of docs/reference/limits.md (Go *Redteam* tests, tests/py/test_redteam_*.py, a 30 s network soak)
	$(GO) test -count=1 -tags $(GOTAGS) -run Redteam ./...
	$(VPY) -m pytest -q tests/py/test_redteam_*.py
	$(MAKE) --no-print-directory soak-net-short

soak-net-short: $(LIB) venv $(PYC) ## Network soak of serve (30 s of slowloris, request batches, bad requests, a dashboard load of event streams, reads, bad requests and actions; then RSS, threads, goroutines back near rest and no event subscription left); part of make test, through soaks-short
	$(TIMED) soak-net-short $(VPY) scripts/soak_net.py --duration 30

bench-resources: $(LIB) venv ## The proof of resource limits across engines (docs/guide/resources.md): 3 engine processes on a throwaway PostgreSQL, limit 3, holders sampled from outside, one SIGKILLed mid-run; about 25 s, exit 1 when an invariant fails
	@$(VPY) scripts/bench_resources.py

bench-scale: $(LIB) ## Per-unit cost at 100, 1,000 and 10,000 for each size-dependent path; SUPERLINEAR marks a ratio > 2
	@$(PYTHON) scripts/bench_scale.py

# Wheels of every studio OS, cross-built here (docs/operations/wheels.md). The C toolchain of cgo is Zig from PyPI
# and Debian's mingw-w64; the checkers are auditwheel, binutils/llvm, file and qemu-user. All are
# installed on first use, so CI (.ci/run) pays nothing for them unless it runs these targets.
WHEEL_VENV   := .venv-wheels
WHEEL_PY     := $(WHEEL_VENV)/bin/python
ZIGLANG      := ziglang==0.14.1
AUDITWHEEL   := auditwheel==6.8.2
WHEEL_APT    := gcc-mingw-w64-x86-64-win32 binutils-mingw-w64-x86-64 binutils llvm file qemu-user libc6-arm64-cross
WHEEL_PLATFORMS := manylinux2014_x86_64 manylinux2014_aarch64 win_amd64 macosx_11_0_arm64 macosx_10_15_x86_64 macosx_10_15_universal2
WHEEL_SCRIPTS := scripts/wheels/golib.sh scripts/wheels/darwin_stubs.py scripts/wheels/darwin-include/mach/mach_vm.h

$(WHEEL_VENV)/.ok: Makefile
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_PY) -m pip install --quiet --disable-pip-version-check $(ZIGLANG) $(AUDITWHEEL) $(SETUPTOOLS)
	@touch $@

wheel-tools: $(WHEEL_VENV)/.ok
	@scripts/wheels/apt-tools.sh $(WHEEL_APT)

build/wheels/%/.lib: $(GO_SOURCES) $(WHEEL_SCRIPTS) | wheel-tools
	WHEEL_PY=$(WHEEL_PY) GO=$(GO) scripts/wheels/golib.sh $*
	@touch $@

# universal2 is the lipo of the two thin macOS builds.
build/wheels/macosx_10_15_universal2/.lib: build/wheels/macosx_11_0_arm64/.lib build/wheels/macosx_10_15_x86_64/.lib

wheels: $(foreach p,$(WHEEL_PLATFORMS),build/wheels/$(p)/.lib) ## Cross-build one wheel per studio OS into dist/ (manylinux2014 x86_64/aarch64, win_amd64, macOS arm64/x86_64/universal2)
	WHEEL_PY=$(WHEEL_PY) scripts/wheels/package.sh $(WHEEL_PLATFORMS)

test-wheels: wheels ## Check every wheel of make wheels: manylinux tags and glibc, installs on Python 3.7/3.13, aarch64 under qemu, Mach-O and PE exports, the Go suites and the DLL under Wine
	WHEEL_PY=$(WHEEL_PY) scripts/wheels/test.sh $(WHEEL_PLATFORMS)

clean: ## Remove build output and the venvs
	rm -rf $(LIBDIR)/libdccflow.* $(TOOLS) $(VENV) $(BENCH_VENV) $(WHEEL_VENV) build/wheels build/otelcol $(OTEL_VENV) .pytest_cache
