# kusaw — see README.md. Every target installs (as root) or names (otherwise)
# the system packages it needs.
GO      ?= go
BIN     := bin/kusaw
BRIDGE  := $(dir $(BIN))kusaw-bridge
DAEMON  := $(dir $(BIN))kusaw-daemon
PREFIX  ?= /usr/local
PKGS    := ./...
export GOFLAGS := -buildvcs=false
# make build stamps what kusaw version prints (a plain go build says devel).
# -s -w leave out the symbol table and DWARF (stack traces keep their names):
# about 0.4 ms less per start of kusaw (docs/benchmarks.md, "Lean start,
# third pass"); build without them to debug with delve.
VERSION  := $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT   := $(shell git rev-parse HEAD 2>/dev/null)
MODIFIED := $(shell test -n "$$(git status --porcelain 2>/dev/null)" && echo true || echo false)
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.modified=$(MODIFIED)
# kusaw itself links no go-git: its package initialisers cost every start
# about 1 ms, and without it worktree reads through the git binary
# (docs/benchmarks.md, "Lean start, seventh pass (issue 25)").
# kusaw-daemon, which runs the attempts of serve and of workers, keeps it.
KUSAW_TAGS := kusaw_nogogit

.PHONY: all build install test lint vet fmt demo e2e-egress bench docs deps clean container-test

all: build

deps:
	@scripts/ensure-deps.sh git:git bwrap:bubblewrap curl:curl node:nodejs npm:npm cc:gcc libc.a:libc6-dev

# Statically linked (no dynamic loader at each start; os/user without
# NSS), and beside kusaw: kusaw-bridge, the small first process of every
# sandbox, and kusaw-daemon, which kusaw serve and kusaw worker hand over
# to, so that kusaw itself links no daemon code (docs/benchmarks.md has
# the figures). kusaw refuses a kusaw-daemon of another build.
# kusaw-bridge is built with cgo and glibc linked statically when a C
# compiler with a static C library is here: its confinement stage then
# runs in C before the Go runtime starts (docs/benchmarks.md, "Kernel
# filters, fourth pass"); without one, the same stage in Go.
build:
	CGO_ENABLED=0 $(GO) build -tags $(KUSAW_TAGS) -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/kusaw
	@f=$$($(CC) -print-file-name=libc.a 2>/dev/null); if [ -f "$$f" ] && [ "$${f#/}" != "$$f" ]; then \
	  echo "CGO_ENABLED=1 $(GO) build -tags netgo,osusergo -ldflags '$(LDFLAGS) -linkmode external -extldflags -static' -o $(BRIDGE) ./cmd/kusaw-bridge"; \
	  CGO_ENABLED=1 $(GO) build -tags netgo,osusergo -ldflags '$(LDFLAGS) -linkmode external -extldflags -static' -o $(BRIDGE) ./cmd/kusaw-bridge; \
	else \
	  echo "kusaw-bridge: no C compiler with a static C library ($(CC); apt-get install gcc libc6-dev): building its Go confinement stage, about 2 ms slower per sandboxed step"; \
	  CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BRIDGE) ./cmd/kusaw-bridge; \
	fi
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(DAEMON) ./cmd/kusaw-daemon

# install: kusaw, kusaw-bridge and kusaw-daemon into $(PREFIX)/bin (the
# other two must sit beside kusaw to be used).
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(BRIDGE) $(DAEMON) $(DESTDIR)$(PREFIX)/bin/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "not gofmt'd (run make fmt):"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags $(KUSAW_TAGS) ./cmd/kusaw ./worktree
	@GO=$(GO) scripts/check-tidy.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

# test: unit tests, e2e tests against real git, bwrap and sockets, the
# darwin build, brief fuzzing. Needs git, bubblewrap, curl, Node.js and npm
# (make deps) and Chromium for the web page test (the test installs it as
# root, else names the command).
test: deps lint
	@GO=$(GO) PKGS='$(PKGS)' scripts/test.sh

# The probes P1–P7 (sandbox doctor), the egress client suite and the
# proxy's own tests (whose names do not say Egress: the package does).
e2e-egress: deps
	$(GO) test -count=1 -run 'Egress|Probe' -v ./e2e/
	$(GO) test -count=1 -v ./egress/

demo: deps build
	@scripts/demo.sh

# container-test: deploy/worker/Containerfile built and run with a Docker
# daemon of its own (root; a few minutes: make test leaves it unbuilt
# where no container runtime answers).
container-test: deps build
	@scripts/container-test.sh

bench: deps build
	@scripts/bench.sh

docs:
	$(GO) test ./status -run TestStatusesPageFresh -update >/dev/null
	$(GO) test ./config -run 'TestValidationPageFresh|TestSchemaPageFresh' -update >/dev/null
	$(GO) test ./cmd/kusaw -run TestCLIPageFresh -update >/dev/null
	$(GO) test ./providers -run TestCapabilitiesPageFresh -update >/dev/null
	$(GO) test ./record -run TestEventTypesPageFresh -update >/dev/null

clean:
	rm -rf bin
