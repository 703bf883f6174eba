# kwatch developer targets. `make test` is the one command that runs every test
# (unit, golden and end-to-end against a real control plane); .ci/run calls it.

GO ?= go
BIN ?= bin/kwatch
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/kwatch/kwatch/cmd.version=$(VERSION)

PREFIX ?= /usr/local

# kwatch's image: IMAGE:IMAGE_TAG, e.g. kwatch:v1.2.0 (docker.io/library/kwatch
# to containerd and the CRI); IMAGE=registry.example/kwatch names it for a
# registry.
IMAGE ?= kwatch
IMAGE_TAG ?= $(VERSION)
IMAGE_TAR ?= bin/kwatch-image.tar

.PHONY: build install image image-push image-name test test-short lint cluster-up cluster-down record bench bench-live fuzz

build: ## build bin/kwatch
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) .

install: build ## install kwatch and its kubectl plugin link (kubectl kwatch) into $(PREFIX)/bin
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/kwatch
	ln -sf kwatch $(DESTDIR)$(PREFIX)/bin/kubectl-kwatch

image: build ## write kwatch's OCI image ($(IMAGE):$(IMAGE_TAG), entrypoint kwatch) to $(IMAGE_TAR), an OCI layout tarball for ctr images import
	$(GO) run ./hack/image -binary $(BIN) -name $(IMAGE):$(IMAGE_TAG) -o $(IMAGE_TAR) \
		-label org.opencontainers.image.title=kwatch -label org.opencontainers.image.version=$(VERSION)

image-push: build ## push kwatch's image to the registry of IMAGE (e.g. make image-push IMAGE=registry.example/kwatch), with the Docker config's credentials
	$(GO) run ./hack/image -binary $(BIN) -name $(IMAGE):$(IMAGE_TAG) -push \
		-label org.opencontainers.image.title=kwatch -label org.opencontainers.image.version=$(VERSION)

image-name: ## print the image's name and its file, tab-separated
	@printf '%s\t%s\n' '$(IMAGE):$(IMAGE_TAG)' '$(IMAGE_TAR)'

test: ## all tests: brings the control plane up, runs go test ./..., brings it down
	hack/test.sh

test-short: ## unit and golden tests only (no control plane)
	$(GO) test -short ./...

lint: ## gofmt, go vet, staticcheck
	hack/lint.sh

CBOR ?= 1
cluster-up: ## start the test stack: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl proxy on 127.0.0.1 and nodes 127.0.0.1, 127.0.0.2 (kubelet, containerd) with kwatch's image (CBOR=0: without the CBOR feature gate)
	KWATCH_CBOR=$(CBOR) hack/cluster-up.sh

cluster-down: ## stop the stack started by cluster-up and remove what its nodes made (mounts, cgroups, pods); says what is left
	hack/cluster-down.sh

record: ## record a scenario's watch traffic: make record SCENARIO=watch|bookmarks|proto|cbor|watchlist-gzip|table|big|burst [NAME=my-watch]
	hack/record.sh $(SCENARIO) $(NAME)

FUZZTIME ?= 10m

# FuzzPipeline's inputs are captures of up to 64 KiB: minimizing each new
# interesting one for the default 60 s would take most of its FUZZTIME.
fuzz: ## run every fuzz target for FUZZTIME each (default 10m), one after another
	$(GO) test -run '^$$' -fuzz '^FuzzDecoder$$' -fuzztime $(FUZZTIME) ./pkg/chunk
	$(GO) test -run '^$$' -fuzz '^FuzzSkip$$' -fuzztime $(FUZZTIME) ./pkg/chunk
	$(GO) test -run '^$$' -fuzz '^FuzzFramer$$' -fuzztime $(FUZZTIME) ./pkg/event
	$(GO) test -run '^$$' -fuzz '^FuzzSplitJSONEvent$$' -fuzztime $(FUZZTIME) ./pkg/event
	$(GO) test -run '^$$' -fuzz '^FuzzIndexEventValid$$' -fuzztime $(FUZZTIME) ./pkg/event
	$(GO) test -run '^$$' -fuzz '^FuzzReadMeta$$' -fuzztime $(FUZZTIME) ./pkg/event
	$(GO) test -run '^$$' -fuzz '^FuzzRedact$$' -fuzztime $(FUZZTIME) ./pkg/event
	$(GO) test -run '^$$' -fuzz '^FuzzScanString$$' -fuzztime $(FUZZTIME) ./pkg/event
	$(GO) test -run '^$$' -fuzz '^FuzzCBORFramer$$' -fuzztime $(FUZZTIME) ./pkg/event
	$(GO) test -run '^$$' -fuzz '^FuzzInflate$$' -fuzztime $(FUZZTIME) ./pkg/inflate
	$(GO) test -run '^$$' -fuzz '^FuzzValidUTF8$$' -fuzztime $(FUZZTIME) ./pkg/printer
	$(GO) test -run '^$$' -fuzz '^FuzzEventLine$$' -fuzztime $(FUZZTIME) ./pkg/printer
	$(GO) test -run '^$$' -fuzz '^FuzzJSONReader$$' -fuzztime $(FUZZTIME) ./pkg/printer
	$(GO) test -run '^$$' -fuzz '^FuzzMergePatch$$' -fuzztime $(FUZZTIME) ./pkg/diff
	$(GO) test -run '^$$' -fuzz '^FuzzConn$$' -fuzztime $(FUZZTIME) ./pkg/httpconn
	$(GO) test -run '^$$' -fuzz '^FuzzConn$$' -fuzztime $(FUZZTIME) ./pkg/h2conn
	$(GO) test -run '^$$' -fuzz '^FuzzCredentialMask$$' -fuzztime $(FUZZTIME) ./pkg/h2conn
	$(GO) test -run '^$$' -fuzz '^FuzzConn$$' -fuzztime $(FUZZTIME) ./pkg/tlsconn
	$(GO) test -run '^$$' -fuzz '^FuzzJoin$$' -fuzztime $(FUZZTIME) ./pkg/wire
	$(GO) test -run '^$$' -fuzz '^FuzzPipeline$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./pkg/pcap
	$(GO) test -run '^$$' -fuzz '^FuzzFind$$' -fuzztime $(FUZZTIME) ./pkg/gotls
	$(GO) test -run '^$$' -fuzz '^FuzzFindPatched$$' -fuzztime $(FUZZTIME) ./pkg/gotls
	$(GO) test -run '^$$' -fuzz '^FuzzLayoutPatched$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 2s ./pkg/gotls
	$(GO) test -run '^$$' -fuzz '^FuzzFilter$$' -fuzztime $(FUZZTIME) ./pkg/live
	$(GO) test -run '^$$' -fuzz '^FuzzParseTCP$$' -fuzztime $(FUZZTIME) ./pkg/procnet
	$(GO) test -run '^$$' -fuzz '^FuzzPacketTuple$$' -fuzztime $(FUZZTIME) ./pkg/attach

bench: ## kwatch against TShark, the pcapgo floor and kubectl; writes bench/RESULTS.md (BENCH_LARGE=1 adds 1 GB)
	bench/run.sh

bench-live: ## kwatch pcap -i lo and kwatch attach following a watch at 10 000 events/s: CPU, peak RSS, drops (root; prints a table)
	bench/live.sh
