#!/usr/bin/env bash
# The one test command (`make test`, run by .ci/run): unit, golden and
# end-to-end tests against a real control plane.
#
# 1. Brings the stack up with hack/cluster-up.sh (building it first if the
#    cached binaries are missing: 5-10 minutes cold on 2 cores). If it cannot
#    start, this fails: the end-to-end tests must not silently skip.
# 2. Exports KUBECONFIG, PROXY_URL and KWATCH_CLUSTER_ENV, so that
#    internal/e2e uses this stack and never starts another one.
# 3. Runs `go test -count=1 -timeout 30m ./...`, then the packages whose
#    work is spread over goroutines (kwatch pcap's stages, the live tap)
#    again under the race detector; arguments, if any, replace both
#    (e.g. `hack/test.sh -run TestX ./internal/e2e/`).
# 4. Brings the stack down again, even on failure or Ctrl-C, unless it was
#    already running before (then it is left as it was found: if only
#    kube-controller-manager was missing, only that is stopped again).
# Exits with go test's status.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$KW_REPO_ROOT"

start=$(date +%s)
elapsed() { echo "$(($(date +%s) - start))s"; }

was_up=0 kcm_was_up=0
kw_pid_alive kube-controller-manager && kcm_was_up=1
if kw_core_healthy; then
  was_up=1
  if [ "$kcm_was_up" = 1 ]; then
    kw_log "control plane already running; it will be left running"
  else
    kw_log "control plane already running without kube-controller-manager; cluster-up adds it, and only that is stopped afterwards"
  fi
fi

finish() {
  local rc=$?
  if [ "$was_up" = 0 ]; then
    kw_log "stopping the control plane"
    "$KW_REPO_ROOT/hack/cluster-down.sh" || rc=1
  elif [ "$kcm_was_up" = 0 ]; then
    kw_log "stopping kube-controller-manager (the rest was running before)"
    kw_stop kube-controller-manager || rc=1
  fi
  kw_log "hack/test.sh: total time $(elapsed) (exit $rc)"
  exit "$rc"
}
trap finish EXIT
# Turn signals into a normal exit so that the EXIT trap stops the stack.
trap 'exit 130' INT
trap 'exit 143' TERM

if ! env_lines="$("$KW_REPO_ROOT/hack/cluster-up.sh")"; then
  kw_die "the control plane did not start (see above); the end-to-end tests need it"
fi
while IFS='=' read -r key value; do
  case "$key" in
    KUBECONFIG | PROXY_URL) export "$key=$value" ;;
  esac
done <<<"$env_lines"
[ -n "${KUBECONFIG:-}" ] && [ -n "${PROXY_URL:-}" ] ||
  kw_die "cluster-up.sh printed no KUBECONFIG/PROXY_URL lines: $env_lines"
export KWATCH_CLUSTER_ENV="$KW_RUN_DIR/env"
kw_log "control plane ready after $(elapsed): KUBECONFIG=$KUBECONFIG PROXY_URL=$PROXY_URL"

# Generous timeout: the suite itself takes far less, but a slow, shared CI
# machine should fail on a real hang, not on a tight budget.
rc=0
if [ $# -gt 0 ]; then
  go test -count=1 -timeout 30m "$@" || rc=$?
  exit "$rc"
fi
go test -count=1 -timeout 30m ./... || rc=$?
kw_log "race detector: pkg/pcap, pkg/httpconn, pkg/watchclient (after $(elapsed))"
go test -race -count=1 -timeout 30m ./pkg/pcap ./pkg/httpconn ./pkg/watchclient || rc=1
exit "$rc"
