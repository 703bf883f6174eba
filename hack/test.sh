#!/usr/bin/env bash
# The one test command (`make test`, run by .ci/run): unit, golden and
# end-to-end tests against a real cluster (control plane and nodes).
#
# 1. Brings the stack up with hack/cluster-up.sh (building it first if the
#    cached binaries are missing: 15-25 minutes cold on 2 cores). If it
#    cannot start, this fails: the end-to-end tests must not silently skip.
# 2. Exports KUBECONFIG, PROXY_URL and KWATCH_CLUSTER_ENV, so that
#    internal/e2e uses this stack and never starts another one.
# 3. Runs `go test -count=1 -timeout 30m ./...`, then the packages whose
#    work is spread over goroutines (kwatch pcap's stages, the live tap)
#    again under the race detector (compiled at the lowest priority while
#    the first run goes on); arguments, if any, replace both
#    (e.g. `hack/test.sh -run TestX ./internal/e2e/`).
# 4. Brings the stack down again, even on failure or Ctrl-C, unless it was
#    already running before (then it is left as it was found: what
#    cluster-up added to it, kube-controller-manager, kube-scheduler or
#    nodes, is stopped again).
# Exits with go test's status.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
cd "$KW_REPO_ROOT"

start=$(date +%s)
elapsed() { echo "$(($(date +%s) - start))s"; }

# What runs before: a stack found running is left as it was found, so only
# what cluster-up adds to it (kube-controller-manager, kube-scheduler or nodes
# of a stack started before they were part of it) is stopped afterwards.
was_up=0
before=()
for c in kube-controller-manager kube-scheduler; do
  kw_pid_alive "$c" && before+=("$c")
done
for n in "${KW_NODES[@]}"; do
  kw_pid_alive "kubelet-$n" && kw_pid_alive "containerd-$n" && before+=("node-$n")
done
if kw_core_healthy; then
  was_up=1
  kw_log "stack already running (with: ${before[*]:-no controller manager, scheduler or node}); what cluster-up adds to it is stopped afterwards"
fi
was_running() { printf '%s\n' "${before[@]}" | grep -qxF -- "$1"; }

finish() {
  local rc=$? c n
  if [ "$was_up" = 0 ]; then
    kw_log "stopping the stack"
    "$KW_REPO_ROOT/hack/cluster-down.sh" || rc=1
  else
    for n in "${KW_NODES[@]}"; do
      if ! was_running "node-$n" && { kw_pid_alive "kubelet-$n" || kw_pid_alive "containerd-$n"; }; then
        kw_log "stopping node $n (it was not running before)"
        kw_node_down "$n" || rc=1
      fi
    done
    for c in kube-scheduler kube-controller-manager; do
      if ! was_running "$c" && kw_pid_alive "$c"; then
        kw_log "stopping $c (it was not running before)"
        kw_stop "$c" || rc=1
      fi
    done
  fi
  kw_log "hack/test.sh: total time $(elapsed) (exit $rc)"
  exit "$rc"
}
trap finish EXIT
# Turn signals into a normal exit so that the EXIT trap stops the stack.
trap 'exit 130' INT
trap 'exit 143' TERM

if ! env_lines="$("$KW_REPO_ROOT/hack/cluster-up.sh")"; then
  kw_die "the stack did not start (see above); the end-to-end tests need it"
fi
while IFS='=' read -r key value; do
  case "$key" in
    KUBECONFIG | PROXY_URL) export "$key=$value" ;;
  esac
done <<<"$env_lines"
[ -n "${KUBECONFIG:-}" ] && [ -n "${PROXY_URL:-}" ] ||
  kw_die "cluster-up.sh printed no KUBECONFIG/PROXY_URL lines: $env_lines"
export KWATCH_CLUSTER_ENV="$KW_RUN_DIR/env"
kw_log "stack ready after $(elapsed): KUBECONFIG=$KUBECONFIG PROXY_URL=$PROXY_URL"

# Generous timeout: the suite itself takes far less, but a slow, shared CI
# machine should fail on a real hang, not on a tight budget.
rc=0
if [ $# -gt 0 ]; then
  go test -count=1 -timeout 30m "$@" || rc=$?
  exit "$rc"
fi
race=(./pkg/pcap ./pkg/httpconn ./pkg/watchclient)
# The race detector's build of those packages (and of what they import,
# client-go's included: minutes cold) is compiled meanwhile, at the lowest
# priority, into the build cache: it takes the CPU the end-to-end tests
# leave while they wait on the stack; its tests run after, at full speed.
nice -n 19 go test -race -count=1 -run '^$' "${race[@]}" >/dev/null 2>&1 &
racebuild=$!
go test -count=1 -timeout 30m ./... || rc=$?
wait "$racebuild" || true  # a build failure is said by the run below
kw_log "race detector: ${race[*]} (after $(elapsed))"
go test -race -count=1 -timeout 30m "${race[@]}" || rc=1
exit "$rc"
