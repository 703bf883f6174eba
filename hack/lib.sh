# shellcheck shell=bash
# Shared functions for the test stack's scripts (cluster-up.sh,
# cluster-down.sh, record.sh, test.sh); the nodes' part is in lib-node.sh,
# sourced at the end. Source it; it defines functions and variables only and
# starts nothing.
#
# Layout (all outside the repository, so a fresh clone on the same machine
# reuses the binaries and nothing built ends up in git):
#   ${XDG_CACHE_HOME:-$HOME/.cache}/kwatch/cluster/<hash>/bin/
#       {etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,
#       kubectl,containerd,containerd-shim-runc-v2,ctr,runc,crictl,pause}
#       <hash> covers hack/cluster's go.mod, go.sum, its .go files, the Go
#       version, the node parts' versions and the build flags, so the binaries
#       are rebuilt only when a pin (or the toolchain) changes.
#   ${KWATCH_CLUSTER_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kwatch/run}/
#       logs, pid files (NAME.pid and NAME.log for NAME in etcd,
#       kube-apiserver, kube-controller-manager, kube-scheduler, proxy, and
#       containerd-N and kubelet-N for each node N), certificates, the etcd
#       data dir, the kubeconfigs (kubeconfig, controller-manager.kubeconfig,
#       scheduler.kubeconfig), the `env` file with KUBECONFIG=… and
#       PROXY_URL=…, `etcd-endpoint` (etcd's client URL, for tests that talk
#       to etcd itself, e.g. to compact), `node-names` (one node a line),
#       `image` (the name of kwatch's image on the nodes), nodes/N/ (each
#       node's folders, lib-node.sh), images/ (the pause image) and `bin`, a
#       symlink to the binaries the running stack was started from.

KW_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KW_CLUSTER_MOD="$KW_REPO_ROOT/hack/cluster"
KW_CACHE_BASE="${XDG_CACHE_HOME:-$HOME/.cache}/kwatch"
KW_RUN_DIR="${KWATCH_CLUSTER_DIR:-$KW_CACHE_BASE/run}"

# Loopback ports. The defaults are the well-known ones, so anyone reading a
# capture recognises them; cluster-up.sh refuses to start if another program
# already holds one of them. The KWATCH_*_PORT variables exist only to run a
# second stack beside the first (with its own KWATCH_CLUSTER_DIR), e.g. a
# cold-build check while a developer's stack is up.
KW_ETCD_CLIENT_PORT="${KWATCH_ETCD_CLIENT_PORT:-2379}"
KW_ETCD_PEER_PORT="${KWATCH_ETCD_PEER_PORT:-2380}"
KW_APISERVER_PORT="${KWATCH_APISERVER_PORT:-6443}"
KW_PROXY_PORT="${KWATCH_PROXY_PORT:-8001}"
# kube-controller-manager's secure port (it serves only /healthz and /metrics
# there; it has no insecure port).
KW_CONTROLLER_MANAGER_PORT="${KWATCH_CONTROLLER_MANAGER_PORT:-10257}"
KW_PROXY_URL="http://127.0.0.1:$KW_PROXY_PORT"

kw_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
kw_die() { kw_log "ERROR: $*"; exit 1; }

# kw_pin MODULE: the version hack/cluster/go.mod requires for MODULE, so that
# the versions live in exactly one place (go.mod) and the scripts follow it.
kw_pin() {
  awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' "$KW_CLUSTER_MOD/go.mod"
}

# Everything that changes what the build produces goes into the flags or into
# the hash below.
kw_ldflags_kube() {
  local v kv major minor
  v=k8s.io/component-base/version
  kv="$(kw_pin k8s.io/kubernetes)"
  major="${kv#v}"; major="${major%%.*}"
  minor="${kv#v*.}"; minor="${minor%%.*}"
  # Without these, `--version` prints v0.0.0-master+$Format:%H$ and the server
  # reports that in /version, which kubectl then warns about.
  printf -- '-s -w -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean' \
    "$v" "$kv" "$v" "$major" "$v" "$minor" "$v"
}

# The node's parts that are not in hack/cluster's module graph, each built as
# its own module, as `go install MODULE/cmd@VERSION` builds it: with the
# dependency versions its release pins (containerd's and crictl's go.mod pin
# gRPC, protobuf and OpenTelemetry releases other than Kubernetes's; in one
# graph the minimum version selection would move the control plane's
# dependencies or theirs). Their versions live here only.
# - containerd 2.4: Kubernetes 1.37 supports containerd 2.3 and 2.4
#   (containerd's RELEASES.md).
# - runc: the release containerd 2.4.2 is tested with (its script/setup/runc-version).
# - crictl (cri-tools) of the Kubernetes minor: cluster-down.sh removes a
#   node's pods through the CRI with it (stopped and removed as the kubelet
#   would: the network torn down, mounts and shims gone).
# - pause: the sandbox image containerd 2.4 pins (its
#   pinned_images.sandbox default), compiled from Kubernetes's own
#   build/pause/linux/pause.c (in the k8s.io/kubernetes module).
KW_CONTAINERD_VERSION=v2.4.2
KW_RUNC_VERSION=v1.5.2
KW_CRICTL_VERSION=v1.37.0
KW_PAUSE_VERSION=3.10.2
KW_PAUSE_IMAGE="registry.k8s.io/pause:$KW_PAUSE_VERSION"

kw_ldflags_containerd() {
  printf -- '-s -w -X github.com/containerd/containerd/v2/version.Version=%s' "$KW_CONTAINERD_VERSION"
}
kw_ldflags_crictl() {
  printf -- '-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=%s' "$KW_CRICTL_VERSION"
}
# As Kubernetes's build/pause/Makefile compiles it.
KW_PAUSE_CFLAGS=(-Os -Wall -Werror -static "-DVERSION=v$KW_PAUSE_VERSION")

# KW_GCFLAGS: the compiler's flags for every Go binary of the stack: no DWARF
# (-dwarf=false), which the linker's -s -w drop anyway; a cold build is about
# a tenth quicker (measured: 50 against 55 CPU seconds for crypto/tls's
# part of the standard library).
KW_GCFLAGS="-gcflags=all=-dwarf=false"

kw_build_hash() {
  (
    cd "$KW_CLUSTER_MOD"
    {
      go env GOVERSION
      echo "CGO_ENABLED=0 -trimpath $KW_GCFLAGS $(kw_ldflags_kube)"
      echo "containerd $KW_CONTAINERD_VERSION $(kw_ldflags_containerd)"
      echo "crictl $KW_CRICTL_VERSION $(kw_ldflags_crictl)"
      echo "runc $KW_RUNC_VERSION CGO_ENABLED=1 -tags seccomp"
      echo "pause ${KW_PAUSE_CFLAGS[*]}"
      # Sorted so the order of `find` does not change the hash.
      find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -print | LC_ALL=C sort |
        while read -r f; do echo "$f"; cat "$f"; done
    } | sha256sum | cut -c1-16
  )
}

KW_BIN_DIR=""
kw_bin_dir() {
  if [ -z "$KW_BIN_DIR" ]; then
    KW_BIN_DIR="$KW_CACHE_BASE/cluster/$(kw_build_hash)/bin"
  fi
  echo "$KW_BIN_DIR"
}

# kw_progress NAME LOG DIR COMMAND...: run COMMAND in DIR in the background
# (output appended to LOG) with a progress line on stderr every 30 s (a cold
# kube-apiserver build is silent for minutes otherwise). Builds run with `-v`,
# which makes go list each package it actually compiles: a count to show.
kw_progress() {
  local name="$1" log="$2" dir="$3" start pid elapsed n n0 rc
  shift 3
  start=$(date +%s)
  n0=$(grep -c '^[a-z]' "$log" || true)  # the log is shared by all builds
  kw_log "building $name ..."
  (cd "$dir" && exec "$@") >>"$log" 2>&1 </dev/null &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    # Sleep in 1 s steps so a finished build is noticed at once.
    for _ in $(seq 30); do
      kill -0 "$pid" 2>/dev/null || break 2
      sleep 1
    done
    elapsed=$(($(date +%s) - start))
    n=$(($(grep -c '^[a-z]' "$log" || true) - n0))
    kw_log "  still building $name: ${elapsed}s elapsed, $n packages compiled so far"
  done
  rc=0
  wait "$pid" || rc=$?
  elapsed=$(($(date +%s) - start))
  if [ "$rc" -ne 0 ]; then
    kw_log "building $name FAILED after ${elapsed}s; last lines of $log:"
    tail -n 40 "$log" >&2
    return 1
  fi
  kw_log "built $name in ${elapsed}s"
}

# The binaries of the stack: one per main package in hack/cluster/cmd, then
# the node's (containerd, its runc shim, ctr, runc, crictl, pause).
KW_BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl
  containerd containerd-shim-runc-v2 ctr runc crictl pause)

# kw_bins_present DIR: true if DIR holds every binary of KW_BINARIES.
kw_bins_present() {
  local b
  for b in "${KW_BINARIES[@]}"; do
    [ -x "$1/$b" ] || return 1
  done
}

# kw_need_build_tools: what the node's build needs beyond Go, said before a
# long build rather than after it.
kw_need_build_tools() {
  command -v gcc >/dev/null || kw_die "gcc is required (runc's seccomp support and the pause binary are C): apt-get install gcc libc6-dev"
  command -v pkg-config >/dev/null || kw_die "pkg-config is required to build runc with seccomp: apt-get install pkg-config libseccomp-dev"
  pkg-config --exists libseccomp || kw_die "libseccomp-dev is required to build runc with seccomp (without it every pod fails: 'seccomp: config provided but seccomp not supported'): apt-get install libseccomp-dev"
}

# kw_build: make sure the binaries exist in the cache; build them if not.
# Safe to run concurrently (flock): a second caller waits for the first.
kw_build() {
  local bindir hashdir tmp lock start kubever etcdver log kubedir
  command -v go >/dev/null || kw_die "go is not on PATH"
  bindir="$(kw_bin_dir)"
  hashdir="$(dirname "$bindir")"
  if kw_bins_present "$bindir"; then
    return 0
  fi
  kw_need_build_tools
  mkdir -p "$hashdir"
  lock="$hashdir/.build.lock"
  exec 8>"$lock"
  if ! flock -n 8; then
    kw_log "another build of the stack is running; waiting for it (up to 60 min)"
    flock -w 3600 8 || kw_die "timed out waiting for the build lock $lock"
  fi
  if kw_bins_present "$bindir"; then
    exec 8>&-
    return 0
  fi
  kubever="$(kw_pin k8s.io/kubernetes)"
  etcdver="$(kw_pin go.etcd.io/etcd/server/v3)"
  [ -n "$kubever" ] && [ -n "$etcdver" ] || kw_die "cannot read the pins from $KW_CLUSTER_MOD/go.mod"
  kw_log "building the stack (etcd $etcdver; kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl $kubever; containerd $KW_CONTAINERD_VERSION, runc $KW_RUNC_VERSION, crictl $KW_CRICTL_VERSION, pause $KW_PAUSE_VERSION) into $bindir"
  kw_log "a cold build takes 15-25 minutes on 2 cores; later runs reuse the cached binaries"
  start=$(date +%s)
  # Build into a temporary directory and rename it at the end, so that an
  # interrupted build never leaves a half-filled bin/ that looks complete.
  tmp="$(mktemp -d "$hashdir/bin.tmp.XXXXXX")"
  log="$hashdir/build.log"
  : >"$log"
  # Download first (quick, ~150 MB cold) so a module proxy problem shows up as
  # such and not as a compile failure.
  kw_log "downloading modules (go mod download) ..."
  (cd "$KW_CLUSTER_MOD" && GOWORK=off go mod download) >>"$log" 2>&1 ||
    { tail -n 20 "$log" >&2; rm -rf "$tmp"; kw_die "go mod download failed (log: $log)"; }
  kubedir="$(cd "$KW_CLUSTER_MOD" && GOWORK=off go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
  # - hack/cluster's mains in one `go build`: they share most packages, and
  #   one build keeps both cores busy while each binary links (the -X flags
  #   name k8s.io/component-base/version, which etcd does not link).
  #   GOWORK=off: a go.work above the repo must not change what we build;
  #   -mod=readonly: go.sum is committed; CGO_ENABLED=0 as upstream builds
  #   these binaries: static, no C compiler.
  # - containerd, crictl: CGO_ENABLED=0 (static; containerd's own static
  #   release builds the same way), in the same Go build cache, where they
  #   reuse what their dependency versions share with Kubernetes's.
  # - runc needs cgo for seccomp (libseccomp), as its releases.
  kw_progress "the control plane and the kubelet $kubever, etcd $etcdver" "$log" "$KW_CLUSTER_MOD" \
    env GOWORK=off CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=readonly" \
    go build -v -trimpath "$KW_GCFLAGS" -ldflags "$(kw_ldflags_kube)" -o "$tmp/" ./cmd/... &&
    kw_progress "containerd $KW_CONTAINERD_VERSION" "$log" "$tmp" \
      env GOWORK=off GOFLAGS= GOBIN="$tmp" CGO_ENABLED=0 \
      go install -v -trimpath "$KW_GCFLAGS" -ldflags "$(kw_ldflags_containerd)" \
      "github.com/containerd/containerd/v2/cmd/containerd@$KW_CONTAINERD_VERSION" \
      "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$KW_CONTAINERD_VERSION" \
      "github.com/containerd/containerd/v2/cmd/ctr@$KW_CONTAINERD_VERSION" &&
    kw_progress "crictl $KW_CRICTL_VERSION" "$log" "$tmp" \
      env GOWORK=off GOFLAGS= GOBIN="$tmp" CGO_ENABLED=0 \
      go install -v -trimpath "$KW_GCFLAGS" -ldflags "$(kw_ldflags_crictl)" "sigs.k8s.io/cri-tools/cmd/crictl@$KW_CRICTL_VERSION" &&
    kw_progress "runc $KW_RUNC_VERSION (cgo, seccomp)" "$log" "$tmp" \
      env GOWORK=off GOFLAGS= GOBIN="$tmp" CGO_ENABLED=1 \
      go install -v -trimpath "$KW_GCFLAGS" -tags seccomp -ldflags "-s -w" "github.com/opencontainers/runc@$KW_RUNC_VERSION" &&
    kw_progress "pause $KW_PAUSE_VERSION (gcc, from $kubedir/build/pause/linux/pause.c)" "$log" "$tmp" \
      gcc "${KW_PAUSE_CFLAGS[@]}" -o "$tmp/pause" "$kubedir/build/pause/linux/pause.c" ||
    { rm -rf "$tmp"; kw_die "building the stack failed (log: $log)"; }
  chmod 755 "$tmp"  # mktemp -d made it private
  rm -rf "$bindir"
  mv "$tmp" "$bindir"
  exec 8>&-
  kw_log "stack built in $(($(date +%s) - start))s"
}

# The components, by the name of their pid and log files. "proxy" is
# `kubectl proxy`, so its executable is kubectl.
kw_exe_of() {
  case "$1" in
    proxy) echo kubectl ;;
    containerd-*) echo containerd ;;
    kubelet-*) echo kubelet ;;
    *) echo "$1" ;;
  esac
}

# kw_pid_alive NAME: true if the pid recorded for NAME runs the binary we
# started (checked through /proc so that a recycled pid is never mistaken for
# ours, and never killed by cluster-down.sh).
kw_pid_alive() {
  local name="$1" pidf pid exe
  pidf="$KW_RUN_DIR/$name.pid"
  [ -s "$pidf" ] || return 1
  pid="$(cat "$pidf")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # A zombie still answers kill -0; it is not running.
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null || true)"
  [ "$(basename "${exe% (deleted)}")" = "$(kw_exe_of "$name")" ]
}

kw_pid() { cat "$KW_RUN_DIR/$1.pid"; }

# kw_log_tail NAME: the end of a component's log, for error messages.
kw_log_tail() {
  local f="$KW_RUN_DIR/$1.log"
  if [ -s "$f" ]; then
    echo "----- last 30 lines of $f -----" >&2
    tail -n 30 "$f" >&2
    echo "----- end of $f -----" >&2
  fi
}

# kw_port_busy PORT: true if something accepts connections on 127.0.0.1:PORT.
kw_port_busy() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

kw_token() { cut -d, -f1 "$KW_RUN_DIR/pki/tokens.csv"; }

# Health probes, each bounded by curl's own timeouts.
kw_etcd_healthy() {
  curl -fsS --max-time 3 "http://127.0.0.1:$KW_ETCD_CLIENT_PORT/health" 2>/dev/null | grep -q '"health":"true"'
}
kw_apiserver_ready() {
  [ -s "$KW_RUN_DIR/cert/apiserver.crt" ] || return 1
  [ "$(curl -sS --max-time 3 --cacert "$KW_RUN_DIR/cert/apiserver.crt" \
    -H "Authorization: Bearer $(kw_token)" \
    "https://127.0.0.1:$KW_APISERVER_PORT/readyz" 2>/dev/null)" = ok ]
}
kw_proxy_serves() {
  curl -fsS --max-time 3 "$KW_PROXY_URL/api" 2>/dev/null | grep -q '"kind": *"APIVersions"'
}
# kube-controller-manager writes a self-signed serving certificate (with its
# CA) into --cert-dir on first start, as kube-apiserver does; /healthz is
# open to anonymous requests (--authorization-always-allow-paths).
kw_controller_manager_healthy() {
  [ -s "$KW_RUN_DIR/cert/kube-controller-manager.crt" ] || return 1
  [ "$(curl -sS --max-time 3 --cacert "$KW_RUN_DIR/cert/kube-controller-manager.crt" \
    "https://127.0.0.1:$KW_CONTROLLER_MANAGER_PORT/healthz" 2>/dev/null)" = ok ]
}

# kw_wait_for NAME SECONDS DESCRIPTION PROBE...: poll PROBE every 0.5 s until
# it succeeds, the process NAME dies, or SECONDS pass. On failure print the
# log tail and exit.
kw_wait_for() {
  local name="$1" secs="$2" what="$3" deadline
  shift 3
  deadline=$(($(date +%s) + secs))
  until "$@"; do
    if ! kw_pid_alive "$name"; then
      kw_log "$name exited while waiting for $what"
      kw_log_tail "$name"
      exit 1
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      kw_log "timed out after ${secs}s waiting for $what"
      kw_log_tail "$name"
      exit 1
    fi
    sleep 0.5
  done
}

# kw_core_healthy: etcd, kube-apiserver and the proxy, the part of the stack
# that clients talk to, are ours, alive, and answer.
kw_core_healthy() {
  kw_pid_alive etcd && kw_pid_alive kube-apiserver && kw_pid_alive proxy &&
    [ -s "$KW_RUN_DIR/kubeconfig" ] && [ -s "$KW_RUN_DIR/env" ] &&
    kw_etcd_healthy && kw_apiserver_ready && kw_proxy_serves
}

kw_scheduler_healthy() {
  [ "$(curl -sS --max-time 3 -k "https://127.0.0.1:$KW_SCHEDULER_PORT/healthz" 2>/dev/null)" = ok ]
}

# kw_control_plane_healthy: the control plane's five components are ours,
# alive, and answer.
kw_control_plane_healthy() {
  kw_core_healthy && kw_pid_alive kube-controller-manager && kw_controller_manager_healthy &&
    kw_pid_alive kube-scheduler && kw_scheduler_healthy
}

# kw_stack_healthy: the control plane and every node of KWATCH_NODES.
kw_stack_healthy() {
  kw_control_plane_healthy && kw_nodes_healthy
}

# kw_stop NAME: SIGTERM the recorded pid, wait up to 10 s, then SIGKILL. Only
# a pid that still runs our binary is signalled (see kw_pid_alive).
kw_stop() {
  local name="$1" pid deadline
  if ! kw_pid_alive "$name"; then
    rm -f "$KW_RUN_DIR/$name.pid"
    return 0
  fi
  pid="$(kw_pid "$name")"
  kw_log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$(($(date +%s) + 10))
  while kw_pid_alive "$name"; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      kw_log "$name (pid $pid) still running 10s after SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
      break
    fi
    sleep 0.2
  done
  if kw_pid_alive "$name"; then
    kw_log "ERROR: $name (pid $pid) survived SIGKILL"
    return 1
  fi
  rm -f "$KW_RUN_DIR/$name.pid"
}

# shellcheck source=hack/lib-node.sh
source "$KW_REPO_ROOT/hack/lib-node.sh"
