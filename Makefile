# asyncagents — build, test and demo.
#
#   make test   vet (also with the oldest supported Go, and for Windows and macOS), gofmt check,
#               race tests including the real-server suite (what CI runs)
#   make demo   the main job on a real `opencode serve` with the scripted model
#   make bench  the benchmarks (P-*)
#   make testdata  capture fork's golden-test sessions from a real server and rewrite the goldens
#
# The OpenCode server is the npm package opencode-ai, pinned in tools/opencode/package-lock.json
# and installed with `npm ci` into .cache/opencode. Go modules come through the module proxy.

SHELL        := bash
GO           ?= go
OPENCODE_DIR := $(CURDIR)/.cache/opencode
OPENCODE_PIN := $(shell sed -n 's/.*"opencode-ai": *"\([^"]*\)".*/\1/p' tools/opencode/package.json)
export OPENCODE_BIN ?= $(OPENCODE_DIR)/node_modules/.bin/opencode
# opencode (even `--version`, and the package's postinstall) creates folders under its XDG
# directories: point them into the cache so nothing is written to the real HOME. npm keeps
# its own HOME (its config lives there).
OPENCODE_XDG := XDG_CONFIG_HOME=$(OPENCODE_DIR)/home/.config XDG_DATA_HOME=$(OPENCODE_DIR)/home/.local/share \
	XDG_CACHE_HOME=$(OPENCODE_DIR)/home/.cache XDG_STATE_HOME=$(OPENCODE_DIR)/home/.local/state

.PHONY: all test vet compat fmt-check race demo bench testdata opencode clean

all: test

# opencode installs the pinned server once; the stamp names the version so a new pin reinstalls.
opencode: $(OPENCODE_DIR)/.installed-$(OPENCODE_PIN)

$(OPENCODE_DIR)/.installed-$(OPENCODE_PIN): tools/opencode/package.json tools/opencode/package-lock.json
	@command -v npm >/dev/null || { echo "npm is required to install opencode-ai (Node.js >= 18)"; exit 1; }
	rm -rf $(OPENCODE_DIR) && mkdir -p $(OPENCODE_DIR)
	cp tools/opencode/package.json tools/opencode/package-lock.json $(OPENCODE_DIR)/
	@# npm ci rejects npm 11 lockfiles that omit other platforms' optional packages; the pins are exact,
	@# so npm install against the committed lock (integrity-checked) installs the same files.
	cd $(OPENCODE_DIR) && $(OPENCODE_XDG) npm install --no-audit --no-fund --loglevel=error
	@# npm may skip opencode-ai's postinstall (it links the platform binary); run it when the bin does not answer.
	@$(OPENCODE_XDG) $(OPENCODE_BIN) --version >/dev/null 2>&1 || (cd $(OPENCODE_DIR)/node_modules/opencode-ai && $(OPENCODE_XDG) node postinstall.mjs)
	@v=$$($(OPENCODE_XDG) $(OPENCODE_BIN) --version) && [ "$$v" = "$(OPENCODE_PIN)" ] || { echo "opencode --version: want $(OPENCODE_PIN), got '$$v'"; exit 1; }
	touch $@

test: opencode vet compat fmt-check race

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

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files --others --exclude-standard '*.go' 2>/dev/null)); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

race: opencode
	$(GO) test -race -count=1 -timeout 25m ./...

demo: opencode
	$(GO) run ./examples/demo

bench: opencode
	$(GO) test -run '^$$' -bench . -benchmem ./...

# testdata captures fork/testdata/*.json from a real server and rewrites the golden files.
testdata: opencode
	ASYNCAGENTS_CAPTURE=1 $(GO) test -count=1 -run TestCaptureTestdata ./fork/
	$(GO) test -count=1 ./fork/ -run TestGolden -update

clean:
	rm -rf .cache
