# asyncagents — build, test and demo.
#
#   make test   gofmt check, race tests including the real-server suite with the full vet, and
#               beside them at idle priority vet with the oldest supported Go and for Windows and
#               macOS (what CI runs)
#   make build  the command, into bin/asyncagents (bin/ is ignored by git)
#   make demo   the main job on a real `opencode serve` with the scripted model
#   make bench  the benchmarks (P-*)
#   make bench-waves  what a parent's notifications cost its model on a real server: turns,
#               characters and latencies per notification policy (takes minutes, not run by test or bench)
#   make bench-fork-modes  what each fork mode shares with the caller's last model request, for
#               callers of 10, 100 and 1,000 messages on a real server (a minute or two; not run by test or bench)
#   make bench-hosts  Managers sharing PostgreSQL against one on a file store, on a real server:
#               launches and run ends per second, latencies, database round trips per task, and
#               the takeover time after a Manager stops (minutes; not run by test or bench)
#   make bench-fork  a forked launch's read of long parents imported into a real server, whole and
#               paged: server, decode and pipeline time (P-4; takes minutes, not run by test or bench)
#   make testdata  capture fork's golden-test sessions from a real server and rewrite the goldens
#   make postgres  install Debian's postgresql (initdb and postgres, which pgstore's tests start
#               in temporary folders), when it is missing (run by race and so by test)
#   make tui      install Debian's tmux for the TUI tests, when it is missing (run by race and so by test)
#   make browser  install Debian's chromium for the dashboard's browser test, when it is missing
#               (run by race and so by test)
#   make test-versions  the race tests (real-server suite included) and a capture run against the
#               pinned server and each older release in deps/opencode-versions/ (not run by CI);
#               TEST_VERSIONS="1.14.41" picks others, TESTFLAGS="-v" is passed to go test
#
# The OpenCode server is the npm package opencode-ai, pinned in deps/opencode/package-lock.json
# and installed with `npm ci` into .cache/opencode. Go modules come through the module proxy.
# Older releases for test-versions are pinned in deps/opencode-versions/<version>/ and
# installed the same way into .cache/opencode-<version>.

SHELL        := bash
GO           ?= go
OPENCODE_DIR := $(CURDIR)/.cache/opencode
OPENCODE_PIN := $(shell sed -n 's/.*"opencode-ai": *"\([^"]*\)".*/\1/p' deps/opencode/package.json)
export OPENCODE_BIN ?= $(OPENCODE_DIR)/node_modules/.bin/opencode
# opencode (even `--version`, and the package's postinstall) creates folders under its XDG
# directories: point them into the cache so nothing is written to the real HOME. npm keeps
# its own HOME (its config lives there).
OPENCODE_XDG := XDG_CONFIG_HOME=$(OPENCODE_DIR)/home/.config XDG_DATA_HOME=$(OPENCODE_DIR)/home/.local/share \
	XDG_CACHE_HOME=$(OPENCODE_DIR)/home/.cache XDG_STATE_HOME=$(OPENCODE_DIR)/home/.local/state

.PHONY: all build test vet compat compat-idle fmt-check race tui postgres demo bench bench-hosts bench-waves bench-fork-modes bench-fork testdata opencode browser test-versions clean

all: test

# opencode installs the pinned server once; the stamp names the version so a new pin reinstalls.
opencode: $(OPENCODE_DIR)/.installed-$(OPENCODE_PIN)

$(OPENCODE_DIR)/.installed-$(OPENCODE_PIN): deps/opencode/package.json deps/opencode/package-lock.json
	@command -v npm >/dev/null || { echo "npm is required to install opencode-ai (Node.js >= 18)"; exit 1; }
	rm -rf $(OPENCODE_DIR) && mkdir -p $(OPENCODE_DIR)
	cp deps/opencode/package.json deps/opencode/package-lock.json $(OPENCODE_DIR)/
	@# npm ci rejects npm 11 lockfiles that omit other platforms' optional packages; the pins are exact,
	@# so npm install against the committed lock (integrity-checked) installs the same files.
	cd $(OPENCODE_DIR) && $(OPENCODE_XDG) npm install --no-audit --no-fund --loglevel=error
	@# npm may skip opencode-ai's postinstall (it links the platform binary); run it when the bin does not answer.
	@$(OPENCODE_XDG) $(OPENCODE_BIN) --version >/dev/null 2>&1 || (cd $(OPENCODE_DIR)/node_modules/opencode-ai && $(OPENCODE_XDG) node postinstall.mjs)
	@v=$$($(OPENCODE_XDG) $(OPENCODE_BIN) --version) && [ "$$v" = "$(OPENCODE_PIN)" ] || { echo "opencode --version: want $(OPENCODE_PIN), got '$$v'"; exit 1; }
	touch $@

# test vets inside the race run (go test -vet=all: the full go vet, on the packages the race
# build compiles anyway) and runs compat beside it at idle priority: the other toolchain and
# platforms compile everything again, which on a fresh machine is most of the setup time, and
# at idle priority they take only CPU the tests leave unused.
test: opencode fmt-check
	$(MAKE) --no-print-directory -j2 race compat-idle

build:
	$(GO) build -o bin/ ./cmd/asyncagents

vet:
	$(GO) vet ./...

# compat proves go.mod's go line: the module builds with that Go (the toolchain comes through
# the module proxy) and for the other platforms.
GO_MIN := $(shell sed -n 's/^go //p' go.mod)
compat:
	GOTOOLCHAIN=go$(GO_MIN) $(GO) vet ./...
	GOOS=windows $(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	$(GO) mod tidy -diff

# compat-idle runs compat with the scheduling policy SCHED_IDLE (chrt, from util-linux), or at
# nice 19 where chrt is missing or may not set it.
IDLE := $(if $(shell chrt --idle 0 true 2>/dev/null && echo ok),chrt --idle 0,nice -n 19)
compat-idle:
	$(IDLE) $(MAKE) --no-print-directory compat

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files --others --exclude-standard '*.go' 2>/dev/null)); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# race runs the full go vet on what it builds (-vet=all; go test's default runs only part of it).
RACE_VET ?= all
race: opencode browser postgres tui
	$(GO) test -race -count=1 -vet=$(RACE_VET) -timeout 25m ./...

# browser installs Debian's chromium, which dashboard/browser_test.go drives headless, unless a
# chromium is there already (then it prints nothing). It runs apt-get as root, or through sudo
# when that needs no password; it reads the package lists again when chromium is not in them or
# the first install fails. It never fails the build: without chromium the browser test skips
# and says how to install it, and under CI=true it fails with that message.
browser:
	@command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || deps/apt-install chromium "the dashboard's browser test"

# tui installs Debian's tmux, the pseudo-terminal the TUI tests run OpenCode's TUI in and read
# its screen from, unless it is there, in the same way and with the same rules as browser.
tui:
	@command -v tmux >/dev/null 2>&1 || deps/apt-install tmux "the TUI tests"

# postgres installs Debian's postgresql when no initdb is in /usr/lib/postgresql/*/bin, in the
# same way and with the same rules as browser: the pgstore tests skip without it, and fail under CI=true.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || [ -n "$$PG_BIN" ] || deps/apt-install postgresql "the pgstore tests"

demo: opencode
	$(GO) run ./examples/demo

bench: opencode
	$(GO) test -run '^$$' -bench . -benchmem ./...

# bench-waves runs tasks of one parent on a real server, ending together or over 5 s, the parent
# idle or busy, under each notification policy, and reports the parent's turns and latencies.
bench-waves: opencode
	ASYNCAGENTS_BENCH_WAVES=1 $(GO) test -run '^$$' -bench BenchmarkRealServerWaves -benchtime 1x -timeout 30m .

# bench-hosts: see BenchmarkRealServerHosts.
bench-hosts: opencode postgres
	ASYNCAGENTS_BENCH_HOSTS=1 $(GO) test -run '^$$' -bench BenchmarkRealServerHosts -benchtime 1x -timeout 30m .

# bench-fork-modes launches a forked task in each mode from callers of 10, 100 and 1,000
# messages and reports the prefix its first model request shares with the caller's last one.
bench-fork-modes: opencode
	ASYNCAGENTS_BENCH_FORKMODES=1 $(GO) test -run '^$$' -bench BenchmarkRealServerForkModes -benchtime 1x -timeout 30m .

# bench-fork imports generated parents of 1,000, 5,000 and 20,000 messages, without compaction and
# with a compaction boundary 500 messages from the end, into a real server (opencode import), and
# reports for each a forked read whole and paged, split into server, decode and pipeline time.
bench-fork: opencode
	ASYNCAGENTS_BENCH_FORK=1 $(GO) test -run '^$$' -bench BenchmarkForkRead -benchtime 5x -timeout 60m ./fork/

# testdata captures fork/testdata/*.json from a real server and rewrites the golden files.
testdata: opencode
	ASYNCAGENTS_CAPTURE=1 $(GO) test -count=1 -run TestCaptureTestdata ./fork/
	$(GO) test -count=1 ./fork/ -run TestGolden -update

# test-versions runs the race tests against each version in TEST_VERSIONS, one after the other,
# with OPENCODE_BIN pointing at that version's binary, and TestCaptureTestdata (compaction
# prune and summarize) in a scratch copy of the module, since it rewrites fork/testdata. It goes
# on after a failing version and fails at the end, naming the versions that failed.
OPENCODE_VERSIONS := $(sort $(notdir $(wildcard deps/opencode-versions/*)))
# 1.14.41 is pinned too but not in the default list: it fails four checks of the client
# conformance test on purpose (docs/development.md, OpenCode versions).
TEST_VERSIONS     ?= $(OPENCODE_PIN) 1.17.19 1.15.13
ifneq ($(filter test-versions,$(MAKECMDGOALS)),)
ifneq ($(filter-out $(OPENCODE_PIN) $(OPENCODE_VERSIONS),$(TEST_VERSIONS)),)
$(error TEST_VERSIONS: no pin for $(filter-out $(OPENCODE_PIN) $(OPENCODE_VERSIONS),$(TEST_VERSIONS)); known: $(OPENCODE_PIN) $(OPENCODE_VERSIONS))
endif
endif
# opencode_dir is where version $(1) is installed: the pin in .cache/opencode, others beside it.
opencode_dir = $(if $(filter $(OPENCODE_PIN),$(1)),$(OPENCODE_DIR),$(CURDIR)/.cache/opencode-$(1))
opencode_xdg = XDG_CONFIG_HOME=$(1)/home/.config XDG_DATA_HOME=$(1)/home/.local/share \
	XDG_CACHE_HOME=$(1)/home/.cache XDG_STATE_HOME=$(1)/home/.local/state

# The older pins install as the pinned one does (see the opencode target).
$(CURDIR)/.cache/opencode-%/.installed: deps/opencode-versions/%/package.json deps/opencode-versions/%/package-lock.json
	@command -v npm >/dev/null || { echo "npm is required to install opencode-ai (Node.js >= 18)"; exit 1; }
	rm -rf $(@D) && mkdir -p $(@D)
	cp $^ $(@D)/
	cd $(@D) && $(call opencode_xdg,$(@D)) npm install --no-audit --no-fund --loglevel=error
	@$(call opencode_xdg,$(@D)) $(@D)/node_modules/.bin/opencode --version >/dev/null 2>&1 || \
	  (cd $(@D)/node_modules/opencode-ai && $(call opencode_xdg,$(@D)) node postinstall.mjs)
	@v=$$($(call opencode_xdg,$(@D)) $(@D)/node_modules/.bin/opencode --version) && [ "$$v" = "$*" ] || \
	  { echo "opencode --version: want $*, got '$$v'"; exit 1; }
	touch $@

TEST_VERSIONS_SRC := $(CURDIR)/.cache/test-versions-src
test-versions: $(foreach v,$(TEST_VERSIONS),$(if $(filter $(OPENCODE_PIN),$(v)),opencode,$(call opencode_dir,$(v))/.installed))
	@failed=; for v in $(TEST_VERSIONS); do \
	  bin=$$(if [ "$$v" = "$(OPENCODE_PIN)" ]; then echo $(OPENCODE_DIR); else echo $(CURDIR)/.cache/opencode-$$v; fi)/node_modules/.bin/opencode; \
	  echo "=== opencode $$v: go test -race ./..."; \
	  OPENCODE_BIN=$$bin $(GO) test -race -count=1 -timeout 25m $(TESTFLAGS) ./... || failed="$$failed $$v"; \
	  echo "=== opencode $$v: TestCaptureTestdata (in $(TEST_VERSIONS_SRC))"; \
	  rm -rf $(TEST_VERSIONS_SRC) && mkdir -p $(TEST_VERSIONS_SRC) && \
	    tar -c --exclude=./.cache --exclude=./.git . | tar -x -C $(TEST_VERSIONS_SRC) && \
	    (cd $(TEST_VERSIONS_SRC) && OPENCODE_BIN=$$bin ASYNCAGENTS_CAPTURE=1 $(GO) test -count=1 -run TestCaptureTestdata ./fork/) || \
	    failed="$$failed $$v(capture)"; \
	  rm -rf $(TEST_VERSIONS_SRC); \
	done; \
	if [ -n "$$failed" ]; then echo "test-versions: failed on:$$failed"; exit 1; fi; echo "test-versions: all passed on $(TEST_VERSIONS)"

clean:
	rm -rf .cache
