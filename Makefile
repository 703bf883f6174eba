# kwatch developer targets. `make test` is the one command that runs every test
# (unit, golden and end-to-end against a real control plane); .ci/run calls it.

GO ?= go
BIN ?= bin/kwatch
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/kwatch/kwatch/cmd.version=$(VERSION)

.PHONY: build test test-short lint cluster-up cluster-down record bench fuzz

build: ## build bin/kwatch
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) .

test: ## all tests: brings the control plane up, runs go test ./..., brings it down
	hack/test.sh

test-short: ## unit and golden tests only (no control plane)
	$(GO) test -short ./...

lint: ## gofmt, go vet, staticcheck
	hack/lint.sh

cluster-up: ## start etcd + kube-apiserver + kubectl proxy on 127.0.0.1
	hack/cluster-up.sh

cluster-down: ## stop the control plane started by cluster-up
	hack/cluster-down.sh

record: ## record a scenario's watch traffic: make record SCENARIO=watch
	hack/record.sh $(SCENARIO)
