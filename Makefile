# isolate: build, test, benchmark. Every target installs what it needs.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
# A static binary: copy it to any host. netgo/osusergo keep glibc's NSS
# out of it; libseccomp links in from libseccomp-dev's archive.
GOFLAGS_BUILD := -tags netgo,osusergo -trimpath \
	-ldflags '-s -w -linkmode external -extldflags "-static" -X main.version=$(VERSION)'

.PHONY: all build deps test bench vet fmt clean vmtest

all: build

deps:
	@./scripts/deps.sh
	@go mod download

build: deps
	CGO_ENABLED=1 go build $(GOFLAGS_BUILD) -o bin/isolate ./cmd/isolate

vet:
	go vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }

# The tests run as root against the real kernel; scripts/test.sh also
# reports statement coverage of the runtime packages.
test: build
	./scripts/test.sh

bench: build
	./bin/isolate bench

clean:
	rm -rf bin
