#!/usr/bin/env bash
# gofmt, go vet and staticcheck over the main module.
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l $(git ls-files '*.go' | grep -v '^hack/cluster/') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...
SC_VERSION=v0.8.2  # staticcheck 2026.2.2
if ! command -v staticcheck >/dev/null 2>&1; then
  GOBIN="$(go env GOPATH)/bin" go install "honnef.co/go/tools/cmd/staticcheck@${SC_VERSION}" 
  PATH="$(go env GOPATH)/bin:$PATH"
fi
staticcheck ./...
