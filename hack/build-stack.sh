#!/usr/bin/env bash
# Build the test stack's binaries into their cache (hack/lib.sh kw_build:
# etcd, the control plane, the kubelet, kubectl, containerd, crictl, runc,
# pause), without starting anything; cluster-up.sh then finds them there.
# .ci/run starts it in the background while it lints, so that the
# downloads and the single-threaded link steps of one overlap the other's
# compiles. Safe beside a cluster-up.sh that builds the same (a lock).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
kw_build
kw_log "the stack's binaries are in $(kw_bin_dir)"
