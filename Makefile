# isolate: build, test, benchmark. Every target installs what it needs
# (scripts/deps.sh: Debian packages, a new enough Go toolchain).
SHELL := /bin/bash
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
TAGS := urfave_cli_no_docs,netgo,osusergo,initbin
# A static binary on musl (scripts/cgo-env.sh): copy it to any host.
# netgo/osusergo keep the C library's name services out of it,
# urfave_cli_no_docs keeps the man-page generator (and its start-up cost)
# out; libseccomp links in from libseccomp-dev's archive.
LDFLAGS := -s -w -X main.version=$(VERSION) -X github.com/isolate-sandbox/isolate/cli.Version=$(VERSION)
# The Go toolchain's directory: scripts/deps.sh installs what is missing
# and prints it. A package build (debian/rules) names its own and
# installs nothing.
# It is taken in an assignment of its own: where deps.sh fails, the recipe
# stops (`export PATH="$$(...):$$PATH"` would go on with an empty entry).
GODIR ?= $$(./scripts/deps.sh)
WITH_GO = godir=$(GODIR) && export PATH="$$godir:$$PATH" && . ./scripts/cgo-env.sh &&

.PHONY: all build docs test bench vet clean vmtest demo release

all: build

# The service is a binary of its own (`isolate serve` execs it from
# beside isolate), so that the one-shot isolate links none of its
# dependencies. Both embed the box's init as a small executable of its
# own (tag initbin, isolate/boxinit/initbin), built first.
build:
	@$(WITH_GO) ./scripts/build-init.sh
	@$(WITH_GO) go build -tags $(TAGS) -trimpath -ldflags '$(LDFLAGS)' -o bin/isolate ./cmd/isolate
	@$(WITH_GO) go build -tags $(TAGS) -trimpath -ldflags '$(LDFLAGS)' -o bin/isolate-serve ./cmd/isolate-serve
	@echo "built bin/isolate bin/isolate-serve"

# Man pages and shell completions, written by the CLIs from their own
# commands and flags: isolate built with the generator (without
# urfave_cli_no_docs), only for this.
docs: build
	@$(WITH_GO) go build -tags netgo,osusergo,initbin -trimpath -o build/doc/isolate ./cmd/isolate
	@mkdir -p build/doc/bash build/doc/fish
	build/doc/isolate help-man > build/doc/isolate.1
	build/doc/isolate help-completion bash > build/doc/bash/isolate
	build/doc/isolate help-completion fish > build/doc/fish/isolate.fish
	bin/isolate-serve help-man > build/doc/isolate-serve.1

# One real sandboxed run on this machine, after building everything.
demo: build
	./bin/isolate check
	./bin/isolate run -t 1 -m 64M -- /bin/sh -c 'echo "hello from $$(hostname) as uid $$(id -u)"'

vet:
	@$(WITH_GO) ./scripts/build-init.sh
	@$(WITH_GO) go vet -tags $(TAGS) ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

# The tests run as root against the real kernel; scripts/test.sh also
# reports statement coverage of the runtime packages.
test:
	@$(WITH_GO) ./scripts/test.sh

# Benchmarks, not tests: scripts/bench.sh hands BENCH_FLAGS to
# `isolate bench` (e.g. --precision, --json, --handover, --service);
# docs/PERFORMANCE.md says what each measures.
bench: build
	./scripts/bench.sh $(BENCH_FLAGS)

# The cgroup v2 path, proven in a VM whatever the host's cgroup mode
# (most users' hosts are pure v2). Boots a stock Debian kernel under qemu
# with only cgroup2 and runs the cgroup checks there.
vmtest:
	./scripts/vmtest.sh

# Static isolate and isolate-serve for amd64 and arm64 (arm64
# cross-compiled), tarballs and SHA256SUMS in dist/, each binary checked
# (arm64 under qemu-user: scripts/release-check.sh says what that cannot
# check). The version is git describe's; VERSION=... names another.
# Each tarball also holds the man pages, completions, units, LICENSE and
# the Python client (scripts/release.sh). It installs nothing: what the
# host lacks (the cross compiler, arm64 libraries, qemu-user) it lists;
# RELEASE_INSTALL=1 installs it.
release:
	RELEASE_INSTALL=$(RELEASE_INSTALL) ./scripts/release.sh

clean:
	rm -rf bin build dist
