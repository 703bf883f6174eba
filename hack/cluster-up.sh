#!/usr/bin/env bash
# Start a real Kubernetes cluster on this machine for tests and recordings:
# a control plane on 127.0.0.1, etcd (2379/2380), kube-apiserver (6443),
# kube-controller-manager (10257: /healthz and /metrics), kube-scheduler
# (10259) and `kubectl proxy` (8001); and nodes, each a kubelet with its own
# containerd and runc on a loopback address of its own (127.0.0.1 and
# 127.0.0.2 by default, hack/lib-node.sh), kwatch's image imported into each
# (make image; no registry). All built from Go modules (see hack/lib.sh for
# the cache layout).
#
# Idempotent: if the stack is already up and healthy it only brings kwatch's
# image up to date on the nodes and prints the lines below; if part of it is
# missing it starts that part (e.g. only kube-controller-manager, next to a
# stack started before it was part of it, or a node whose kubelet died).
#
# kube-apiserver runs with --allow-privileged=true (kwatch's node pods are
# privileged), a client certificate for the kubelets and RBAC; a running one
# started without them, or with other feature gates (below), is restarted.
#
# CBOR: KWATCH_CBOR=1 (the default; `make cluster-up CBOR=0` turns it off)
# starts kube-apiserver with the alpha feature gate CBORServingAndStorage, so
# that clients asking for application/cbor get CBOR bodies and CBOR watch
# streams (application/cbor-seq). Clients that do not ask are served as
# before. A running kube-apiserver started with the other setting is
# restarted, with the proxy, which pools connections to it, and
# kube-controller-manager, whose open watches would hold up the server's
# shutdown until the SIGKILL 10 s later.
#
# stdout: exactly two lines, also written to $KW_RUN_DIR/env for sourcing:
#   KUBECONFIG=/abs/path
#   PROXY_URL=http://127.0.0.1:8001
# Everything else (progress, errors, log tails) goes to stderr.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

for tool in curl openssl flock setsid; do
  command -v "$tool" >/dev/null || kw_die "$tool is required (apt-get install curl openssl util-linux)"
done
kw_check_node_settings
if [ ${#KW_NODES[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || kw_die "the stack's nodes need root (cgroups, mounts, network namespaces): run as root, or KWATCH_NODES=none for the control plane alone"
  command -v ip >/dev/null || kw_die "ip is required for the pod network (apt-get install iproute2)"
  [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] ||
    kw_die "the CNI plugins bridge and host-local are required in /usr/lib/cni (apt-get install containernetworking-plugins)"
fi

mkdir -p "$KW_RUN_DIR"
KW_RUN_DIR="$(cd "$KW_RUN_DIR" && pwd)"  # absolute: it ends up in the kubeconfig and env file

# One cluster-up at a time per run folder: test binaries of several packages
# may call this concurrently (through internal/e2e). The others wait here and
# then find the stack healthy. Long bound because the first caller may be
# doing a cold build.
exec 9>"$KW_RUN_DIR/.lock"
if ! flock -n 9; then
  kw_log "another cluster-up.sh is running for $KW_RUN_DIR; waiting for it (up to 30 min)"
  flock -w 1800 9 || kw_die "timed out waiting for the lock $KW_RUN_DIR/.lock"
fi

emit() {
  local kubeconfig="$KW_RUN_DIR/kubeconfig" exe
  # run folder/bin -> the binaries the running stack was started from, so that
  # tests and people can use the matching kubectl ($KW_RUN_DIR/bin/kubectl)
  # without knowing the hash.
  exe="$(readlink "/proc/$(kw_pid proxy)/exe")"
  ln -sfn "$(dirname "$exe")" "$KW_RUN_DIR/bin"
  echo "http://127.0.0.1:$KW_ETCD_CLIENT_PORT" >"$KW_RUN_DIR/etcd-endpoint"
  # The nodes' names, one a line (internal/e2e reads them).
  printf '%s\n' "${KW_NODES[@]}" | sed '/^$/d' >"$KW_RUN_DIR/node-names.tmp"
  mv "$KW_RUN_DIR/node-names.tmp" "$KW_RUN_DIR/node-names"
  # Written atomically: readers (internal/e2e) may look at it any time.
  printf 'KUBECONFIG=%s\nPROXY_URL=%s\n' "$kubeconfig" "$KW_PROXY_URL" >"$KW_RUN_DIR/env.tmp"
  mv "$KW_RUN_DIR/env.tmp" "$KW_RUN_DIR/env"
  cat "$KW_RUN_DIR/env"
}

case "${KWATCH_CBOR:-1}" in
  1 | true) KW_FEATURE_GATES="CBORServingAndStorage=true" ;;
  0 | false) KW_FEATURE_GATES="" ;;
  *) kw_die "KWATCH_CBOR=${KWATCH_CBOR} (CBOR=): want 1 or 0" ;;
esac

# apiserver_gates: the --feature-gates value the running kube-apiserver was
# started with ("" for none).
apiserver_gates() {
  tr '\0' '\n' <"/proc/$(kw_pid kube-apiserver)/cmdline" | sed -n 's/^--feature-gates=//p'
}
# apiserver_has FLAG: the running kube-apiserver was started with FLAG (an
# exact argument such as --allow-privileged=true).
apiserver_has() {
  tr '\0' '\n' <"/proc/$(kw_pid kube-apiserver)/cmdline" | grep -qxF -- "$1"
}
KW_APISERVER_NODE_FLAGS=(
  --allow-privileged=true
  "--kubelet-client-certificate=$KW_RUN_DIR/pki/apiserver-kubelet-client.crt"
  "--kubelet-client-key=$KW_RUN_DIR/pki/apiserver-kubelet-client.key"
)
restart_apiserver() {
  kw_log "$1; restarting it"
  kw_stop proxy
  kw_stop kube-scheduler
  kw_stop kube-controller-manager
  kw_stop kube-apiserver
}
if kw_pid_alive kube-apiserver; then
  if [ "$(apiserver_gates)" != "$KW_FEATURE_GATES" ]; then
    restart_apiserver "kube-apiserver runs with feature gates '$(apiserver_gates)', wanted '$KW_FEATURE_GATES'"
  elif ! apiserver_has --authorization-mode=RBAC; then
    restart_apiserver "kube-apiserver does not authorize with RBAC (started before the stack did)"
  else
    for f in "${KW_APISERVER_NODE_FLAGS[@]}"; do
      if ! apiserver_has "$f"; then
        restart_apiserver "kube-apiserver runs without $f (started before the stack had nodes)"
        break
      fi
    done
  fi
fi

# image_up_to_date: kwatch's image (make image, from this worktree) built and
# imported into every node, each time: `go build` and the image are cached,
# and a node that holds the image's digest already is left alone.
image_up_to_date() {
  local n out name tar
  [ ${#KW_NODES[@]} -gt 0 ] || return 0
  out="$(make -s --no-print-directory -C "$KW_REPO_ROOT" image-name)"
  name="$(cut -f1 <<<"$out")"
  tar="$KW_REPO_ROOT/$(cut -f2 <<<"$out")"
  make -s --no-print-directory -C "$KW_REPO_ROOT" image >&2 || kw_die "make image failed"
  for n in "${KW_NODES[@]}"; do
    kw_image_import "$n" "$tar" || kw_die "importing $tar into node $n's containerd failed"
  done
  echo "$name" >"$KW_RUN_DIR/image.tmp"
  mv "$KW_RUN_DIR/image.tmp" "$KW_RUN_DIR/image"
}

# kube-root-ca.crt in the namespaces default and kube-system, as
# kube-controller-manager's root CA publisher (left out, see above) would
# write it into every namespace: a pod that mounts a service account token
# (its projected volume holds this ConfigMap), such as `kubectl debug
# node/NODE`'s, starts only where it exists. Tests' own namespaces stay
# without it.
publish_root_ca() {
  local ns
  for ns in default kube-system; do
    "$BIN/kubectl" --kubeconfig "$KW_RUN_DIR/kubeconfig" -n "$ns" create configmap kube-root-ca.crt \
      --from-file=ca.crt="$KW_RUN_DIR/pki/apiserver-ca.crt" --dry-run=client -o yaml |
      "$BIN/kubectl" --kubeconfig "$KW_RUN_DIR/kubeconfig" apply -f - >/dev/null ||
      kw_die "writing ConfigMap $ns/kube-root-ca.crt failed"
  done
}
if kw_stack_healthy; then
  kw_log "stack already up (run folder $KW_RUN_DIR)"
  BIN="$(kw_bin_dir)"
  publish_root_ca
  image_up_to_date
  emit
  exit 0
fi

start_all=$(date +%s)
kw_build
BIN="$(kw_bin_dir)"

# If starting fails half-way, stop what this run started (in reverse order),
# so that a failed cluster-up leaves no process behind. Components that were
# already running are left alone.
STARTED=()
on_exit() {
  local rc=$? i
  if [ "$rc" -ne 0 ] && [ ${#STARTED[@]} -gt 0 ]; then
    kw_log "cluster-up failed; stopping what it started: ${STARTED[*]}"
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
      kw_stop "${STARTED[$i]}" || true
    done
  fi
  exit "$rc"
}
trap on_exit EXIT

# kw_start NAME ARGS...: start a component detached from this script.
# - setsid: its own session, so a Ctrl-C in the terminal that ran this script
#   (or go test killing a test binary) does not take the stack down with it;
#   cluster-down.sh is the way to stop it.
# - the child writes its own pid before exec'ing, so the pid file holds the
#   component's pid whatever setsid does about forking.
# - stdin/stdout/stderr are redirected and fds 8/9 (our locks) closed, so the
#   component holds neither the caller's pipes (go test's exec would otherwise
#   wait for it forever) nor our locks.
kw_start() {
  local name="$1" exe pidf log deadline
  shift
  exe="$BIN/$(kw_exe_of "$name")"
  pidf="$KW_RUN_DIR/$name.pid"
  log="$KW_RUN_DIR/$name.log"
  # Keep the previous run's log for post-mortems.
  [ -f "$log" ] && mv -f "$log" "$log.1"
  rm -f "$pidf"
  kw_log "starting $name: $exe $*"
  # KW_START_CGROUP (a node's components): the child joins that cgroup in
  # every hierarchy before it execs, so that all it starts stays there.
  setsid bash -c 'echo $$ >"$0"; cg="$1"; shift
    if [ -n "$cg" ]; then
      for f in /sys/fs/cgroup/*"$cg"/cgroup.procs /sys/fs/cgroup"$cg"/cgroup.procs; do
        [ -e "$f" ] && { echo $$ >"$f" || exit 1; }
      done
    fi
    exec "$@"' "$pidf" "${KW_START_CGROUP:-}" "$exe" "$@" \
    </dev/null >"$log" 2>&1 8>&- 9>&- &
  STARTED+=("$name")
  deadline=$(($(date +%s) + 10))
  until [ -s "$pidf" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || kw_die "$name did not record its pid in $pidf within 10s"
    sleep 0.1
  done
}

# kw_need_port NAME PORT: fail early and clearly if a foreign program holds a
# port we need (e.g. another etcd or a leftover from an older run folder).
kw_need_port() {
  if kw_port_busy "$2"; then
    kw_log "127.0.0.1:$2, needed by $1, is already in use by another program:"
    ss -ltnp "sport = :$2" >&2 2>/dev/null || true
    kw_die "free port $2 (or stop that program) and run $0 again"
  fi
}

# Check every port we are about to need before starting anything.
kw_pid_alive etcd || { kw_need_port etcd "$KW_ETCD_CLIENT_PORT"; kw_need_port etcd "$KW_ETCD_PEER_PORT"; }
kw_pid_alive kube-apiserver || kw_need_port kube-apiserver "$KW_APISERVER_PORT"
kw_pid_alive proxy || kw_need_port "kubectl proxy" "$KW_PROXY_PORT"
kw_pid_alive kube-controller-manager || kw_need_port kube-controller-manager "$KW_CONTROLLER_MANAGER_PORT"
kw_pid_alive kube-scheduler || kw_need_port kube-scheduler "$KW_SCHEDULER_PORT"

# --- credentials --------------------------------------------------------------
# Service-account signing keys and a static admin bearer token. The serving
# certificates are not ours: kube-apiserver and kube-controller-manager each
# write a self-signed one into --cert-dir on first start, and the kubeconfigs
# trust kube-apiserver's file. sa.key signs service-account tokens (the API
# server's --service-account-signing-key-file, the controller manager's
# --service-account-private-key-file); sa.pub verifies them.
mkdir -p "$KW_RUN_DIR/pki" "$KW_RUN_DIR/cert"
chmod 700 "$KW_RUN_DIR/pki"
if [ ! -s "$KW_RUN_DIR/pki/sa.key" ] || [ ! -s "$KW_RUN_DIR/pki/sa.pub" ]; then
  kw_log "generating the service-account key pair"
  openssl genrsa -out "$KW_RUN_DIR/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$KW_RUN_DIR/pki/sa.key" -pubout -out "$KW_RUN_DIR/pki/sa.pub" 2>/dev/null
fi
kw_node_pki
if [ ! -s "$KW_RUN_DIR/pki/tokens.csv" ]; then
  kw_log "generating the admin token"
  # token,user,uid,"groups": system:masters is cluster-admin.
  printf '%s,admin,admin,system:masters\n' "$(openssl rand -hex 32)" >"$KW_RUN_DIR/pki/tokens.csv"
  chmod 600 "$KW_RUN_DIR/pki/tokens.csv"
fi

# --- etcd ---------------------------------------------------------------------
if kw_pid_alive etcd; then
  kw_wait_for etcd 30 "etcd /health" kw_etcd_healthy
else
  # A new etcd means a new, empty store: an API server, proxy or controller
  # manager still running against the old one would serve (or act on) stale
  # caches, so restart everything.
  if kw_pid_alive kube-apiserver || kw_pid_alive proxy || kw_pid_alive kube-controller-manager; then
    kw_log "etcd is not running but other components are; stopping them first"
    "$KW_REPO_ROOT/hack/cluster-down.sh"
  fi
  kw_need_port etcd "$KW_ETCD_CLIENT_PORT"
  kw_need_port etcd "$KW_ETCD_PEER_PORT"
  # Fresh data on every start: tests want a clean store, and a data dir
  # written by one etcd version should not be reused by another.
  rm -rf "$KW_RUN_DIR/etcd-data"
  kw_start etcd \
    --name kwatch \
    --data-dir "$KW_RUN_DIR/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$KW_ETCD_CLIENT_PORT" \
    --advertise-client-urls "http://127.0.0.1:$KW_ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$KW_ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$KW_ETCD_PEER_PORT" \
    --initial-cluster "kwatch=http://127.0.0.1:$KW_ETCD_PEER_PORT"
  kw_wait_for etcd 30 "etcd /health on 127.0.0.1:$KW_ETCD_CLIENT_PORT" kw_etcd_healthy
  kw_log "etcd is healthy"
fi

# --- kube-apiserver -------------------------------------------------------------
if kw_pid_alive kube-apiserver; then
  kw_wait_for kube-apiserver 120 "kube-apiserver /readyz" kw_apiserver_ready
else
  if kw_pid_alive proxy; then
    # The proxy would keep a connection pool to the dead server; restart it too.
    kw_stop proxy
  fi
  kw_need_port kube-apiserver "$KW_APISERVER_PORT"
  # --endpoint-reconciler-type=none: the default reconciler refuses a loopback
  #   advertise address and the server exits.
  # --authorization-mode=RBAC with a token file: one admin identity, in
  #   system:masters (allowed everything before RBAC is asked), used by every
  #   component and test; RBAC refuses the users a test impersonates (kwatch's
  #   node tests: the rules docs/nodes.md gives, and none). /readyz waits for
  #   RBAC's bootstrap roles. Anonymous requests are refused.
  # --watch-cache-sizes=podtemplates#0: PodTemplates bypass the watch cache,
  #   so a watch of them reaches etcd and an etcd compaction makes an old
  #   resourceVersion answer 410 Gone (kwatch's re-list test). The watch cache
  #   of every other resource keeps bookmarks working.
  # --feature-gates: see CBOR at the top.
  # --allow-privileged: kwatch's node pods are privileged (hostPID,
  #   hostNetwork, BPF); the default refuses them.
  # --kubelet-client-certificate/-key: the API server's identity towards
  #   the kubelets (logs, exec, attach), which trust its CA only.
  kw_start kube-apiserver \
    ${KW_FEATURE_GATES:+"--feature-gates=$KW_FEATURE_GATES"} \
    "${KW_APISERVER_NODE_FLAGS[@]}" \
    --etcd-servers="http://127.0.0.1:$KW_ETCD_CLIENT_PORT" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$KW_APISERVER_PORT" \
    --endpoint-reconciler-type=none \
    --cert-dir="$KW_RUN_DIR/cert" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$KW_RUN_DIR/pki/sa.pub" \
    --service-account-signing-key-file="$KW_RUN_DIR/pki/sa.key" \
    --token-auth-file="$KW_RUN_DIR/pki/tokens.csv" \
    --authorization-mode=RBAC \
    --watch-cache-sizes=podtemplates#0 \
    --service-cluster-ip-range=10.0.0.0/24
  # Ready after 2-3 s warm; generous bound for a loaded 2-core machine.
  kw_wait_for kube-apiserver 120 "kube-apiserver /readyz on https://127.0.0.1:$KW_APISERVER_PORT" kw_apiserver_ready
  kw_log "kube-apiserver is ready"
fi

# --- kubeconfigs ----------------------------------------------------------------
# write_kubeconfig FILE USER TOKEN: token auth; the CA is kube-apiserver's
# self-signed serving certificate (its file holds the signing CA too). Written
# atomically: a reader never sees half a file.
write_kubeconfig() {
  umask 077
  cat >"$1.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kwatch
  cluster:
    server: https://127.0.0.1:$KW_APISERVER_PORT
    certificate-authority: $KW_RUN_DIR/cert/apiserver.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: kwatch
  context:
    cluster: kwatch
    user: $2
current-context: kwatch
EOF
  umask 022
  mv "$1.tmp" "$1"
}
write_kubeconfig "$KW_RUN_DIR/kubeconfig" admin "$(kw_token)"
# kube-controller-manager's own file, with the same admin token: this stack has
# no client CA (so no client certificates) and kube-apiserver reads its token
# file only when it starts, so an identity of the controller manager's own
# would mean restarting a running API server to add it. The admin is in
# system:masters, which kube-apiserver allows everything before it asks
# RBAC: the controllers may do all they do on a real cluster.
write_kubeconfig "$KW_RUN_DIR/controller-manager.kubeconfig" admin "$(kw_token)"

# --- kubectl proxy --------------------------------------------------------------
if ! kw_pid_alive proxy; then
  kw_need_port "kubectl proxy" "$KW_PROXY_PORT"
  kw_start proxy --kubeconfig="$KW_RUN_DIR/kubeconfig" proxy \
    --address=127.0.0.1 --port="$KW_PROXY_PORT"
fi
kw_wait_for proxy 30 "kubectl proxy to serve $KW_PROXY_URL/api" kw_proxy_serves

# --- kube-controller-manager ------------------------------------------------------
# The real controllers, so that the stack behaves like a cluster: a deleted
# namespace is emptied and finalized, the garbage collector removes dependents
# of deleted owners, every namespace gets its "default" ServiceAccount. It
# talks to kube-apiserver over TLS on its port, not through the proxy. A
# running one is left alone when kube-apiserver had died and was started
# again above (its informers watch again from where they were, on the same
# etcd); a new etcd restarts everything (above).

# root_ca FILE OUT: the CA certificate (basicConstraints CA:TRUE) among the
# PEM blocks of FILE, written atomically to OUT. kube-apiserver's
# apiserver.crt holds its serving certificate and then the CA that signed it;
# --root-ca-file must be the CA alone: kube-controller-manager also publishes
# it as a ClusterTrustBundle, whose entries must all be CAs.
root_ca() {
  local tmp f
  tmp="$(mktemp -d)"
  awk -v d="$tmp" '/-----BEGIN CERTIFICATE-----/ { n++ } n { print > (d "/" n ".pem") }' "$1"
  for f in "$tmp"/*.pem; do
    if openssl x509 -in "$f" -noout -ext basicConstraints 2>/dev/null | grep -q 'CA:TRUE'; then
      cp "$f" "$2.tmp"
      mv "$2.tmp" "$2"
      rm -rf "$tmp"
      return 0
    fi
  done
  rm -rf "$tmp"
  kw_die "no CA certificate in $1"
}
root_ca "$KW_RUN_DIR/cert/apiserver.crt" "$KW_RUN_DIR/pki/apiserver-ca.crt"

if kw_pid_alive kube-controller-manager; then
  kw_wait_for kube-controller-manager 60 "kube-controller-manager /healthz" kw_controller_manager_healthy
else
  kw_need_port kube-controller-manager "$KW_CONTROLLER_MANAGER_PORT"
  # --authentication-/--authorization-kubeconfig: requests to its /metrics
  #   are checked with the API server (TokenReview, SubjectAccessReview), as
  #   in kubeadm's setup; /healthz stays open to anyone.
  # --authentication-skip-lookup: do not look for client-CA and front-proxy
  #   settings in kube-system/extension-apiserver-authentication, which
  #   kube-apiserver does not write without --client-ca-file (it would log
  #   "not found" every few seconds).
  # --service-account-private-key-file: signs the tokens of service-account
  #   token Secrets (kube-apiserver verifies them with sa.pub).
  # --root-ca-file: the CA put into those Secrets and published as a
  #   ClusterTrustBundle: the CA that signed kube-apiserver's serving
  #   certificate (see root_ca).
  # --use-service-account-credentials=false: every controller uses this
  #   kubeconfig, not a service account of its own.
  # --leader-elect=false: one instance; no Lease to take or renew.
  # --controllers: the default set ('*'), whose members that need what this
  #   stack does not have (a cloud provider, node CIDRs, a CSR signing CA)
  #   disable themselves, saying so in the log; minus the root CA publisher,
  #   which writes a kube-root-ca.crt ConfigMap into every namespace: tests
  #   and recordings (make record) watch the ConfigMaps of a namespace of
  #   their own and expect to see only those they create.
  kw_start kube-controller-manager \
    --kubeconfig="$KW_RUN_DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$KW_RUN_DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$KW_RUN_DIR/controller-manager.kubeconfig" \
    --authentication-skip-lookup \
    --bind-address=127.0.0.1 \
    --secure-port="$KW_CONTROLLER_MANAGER_PORT" \
    --cert-dir="$KW_RUN_DIR/cert" \
    --service-account-private-key-file="$KW_RUN_DIR/pki/sa.key" \
    --root-ca-file="$KW_RUN_DIR/pki/apiserver-ca.crt" \
    --use-service-account-credentials=false \
    --leader-elect=false \
    --controllers='*,-root-ca-certificate-publisher-controller'
  kw_wait_for kube-controller-manager 60 "kube-controller-manager /healthz on https://127.0.0.1:$KW_CONTROLLER_MANAGER_PORT" kw_controller_manager_healthy
  kw_log "kube-controller-manager is healthy"
fi

# The API server creates kube-system (and default) just after /readyz; tests
# and recordings should not race it.
ns_exists() { curl -fsS --max-time 3 -o /dev/null "$KW_PROXY_URL/api/v1/namespaces/kube-system" 2>/dev/null; }
kw_wait_for kube-apiserver 60 "namespace kube-system" ns_exists

# --- kube-scheduler ---------------------------------------------------------------
# Places pods that name no node (those of a Deployment, say) on the nodes, as
# on a cluster; flags as kube-controller-manager's, without leader election.
write_kubeconfig "$KW_RUN_DIR/scheduler.kubeconfig" admin "$(kw_token)"
if kw_pid_alive kube-scheduler; then
  kw_wait_for kube-scheduler 60 "kube-scheduler /healthz" kw_scheduler_healthy
else
  kw_need_port kube-scheduler "$KW_SCHEDULER_PORT"
  kw_start kube-scheduler \
    --kubeconfig="$KW_RUN_DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig="$KW_RUN_DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig="$KW_RUN_DIR/scheduler.kubeconfig" \
    --authentication-skip-lookup \
    --bind-address=127.0.0.1 \
    --secure-port="$KW_SCHEDULER_PORT" \
    --cert-dir="$KW_RUN_DIR/cert" \
    --leader-elect=false
  kw_wait_for kube-scheduler 60 "kube-scheduler /healthz on https://127.0.0.1:$KW_SCHEDULER_PORT" kw_scheduler_healthy
  kw_log "kube-scheduler is healthy"
fi

# --- nodes ----------------------------------------------------------------------
# Each node of KWATCH_NODES (hack/lib-node.sh): containerd, then the pause
# image imported into it, then the kubelet; a node whose containerd is not
# running starts from nothing (what an earlier run left is removed first, as
# etcd starts with fresh data). The kubelet alone is restarted if only it
# died.

# kw_need_node_port NAME ADDRESS PORT: as kw_need_port, on a node's address.
kw_need_node_port() {
  if (exec 3<>"/dev/tcp/$2/$3") 2>/dev/null; then
    kw_log "$2:$3, needed by $1, is already in use by another program:"
    ss -ltnp "sport = :$3" >&2 2>/dev/null || true
    kw_die "free $2:$3 (a kubelet of another stack? give this one other addresses: KWATCH_NODES=127.0.0.3,127.0.0.4)"
  fi
}

# pause_image: the OCI image of the pause binary (hack/image), the sandbox
# image that containerd pins, written once per binary.
pause_image() {
  local tar="$KW_RUN_DIR/images/pause.tar"
  if [ ! -s "$tar" ] || [ "$BIN/pause" -nt "$tar" ]; then
    mkdir -p "$KW_RUN_DIR/images"
    (cd "$KW_REPO_ROOT" && GOFLAGS="${GOFLAGS:-} -mod=readonly" go run ./hack/image -binary "$BIN/pause" -path /pause \
      -user 65535:65535 -name "$KW_PAUSE_IMAGE" -o "$tar") >/dev/null ||
      kw_die "writing the pause image failed"
  fi
  echo "$tar"
}

start_node() {
  local n="$1" idx="$2" dir cg
  dir="$(kw_node_dir "$n")"
  cg="$(kw_node_cgroup "$n")"
  if ! kw_pid_alive "containerd-$n"; then
    kw_node_down "$n" || kw_die "node $n: what an earlier run left could not be removed (above)"
    kw_need_node_port "kubelet" "$n" "$KW_KUBELET_PORT"
    kw_need_node_port "kubelet healthz" "$n" "$KW_KUBELET_HEALTHZ_PORT"
    rm -rf "$dir/containerd" "$dir/runc" "$dir/kubelet" "$dir/pod-logs" "$dir/volume-plugins" "$dir/cni"
    kw_write_node_config "$n" "$idx"
    kw_cgroup_make "$cg/system"
    KW_START_CGROUP="$cg/system" kw_start "containerd-$n" --config "$dir/containerd.toml"
    kw_wait_for "containerd-$n" 60 "containerd of node $n on $dir/containerd.sock" kw_containerd_serves "$n"
    kw_image_import "$n" "$PAUSE_TAR" || kw_die "importing the pause image into node $n failed"
  fi
  if ! kw_pid_alive "kubelet-$n"; then
    kw_need_node_port "kubelet" "$n" "$KW_KUBELET_PORT"
    kw_need_node_port "kubelet healthz" "$n" "$KW_KUBELET_HEALTHZ_PORT"
    write_kubeconfig "$dir/kubelet.kubeconfig" admin "$(kw_token)"
    kw_cgroup_make "$cg/system"
    # --hostname-override: the node's name and its Hostname address, which
    #   the API server dials first (--kubelet-preferred-address-types);
    #   --node-ip refuses loopback addresses.
    # --cert-dir: its default is /var/lib/kubelet/pki whatever --root-dir.
    KW_START_CGROUP="$cg/system" kw_start "kubelet-$n" \
      --config="$dir/kubelet.yaml" \
      --kubeconfig="$dir/kubelet.kubeconfig" \
      --root-dir="$dir/kubelet" \
      --cert-dir="$dir/kubelet/pki" \
      --hostname-override="$n"
    kw_wait_for "kubelet-$n" 60 "the kubelet of node $n (http://$n:$KW_KUBELET_HEALTHZ_PORT/healthz)" kw_kubelet_healthy "$n"
  fi
}

if [ ${#KW_NODES[@]} -gt 0 ]; then
  # containerd finds its runc shim on PATH.
  export PATH="$BIN:$PATH"
  kw_bridge_up
  PAUSE_TAR="$(pause_image)"
  i=0
  for n in "${KW_NODES[@]}"; do
    start_node "$n" "$i"
    i=$((i + 1))
  done
  for n in "${KW_NODES[@]}"; do
    kw_wait_for "kubelet-$n" 120 "node $n to be Ready" kw_node_ready "$n"
  done
  kw_log "nodes Ready: ${KW_NODES[*]}"
fi
publish_root_ca

# Nodes of this run folder that KWATCH_NODES no longer names.
for n in $(kw_nodes_running); do
  if ! printf '%s\n' "${KW_NODES[@]}" | grep -qxF -- "$n"; then
    kw_log "node $n is not in KWATCH_NODES (${KW_NODES[*]:-none}); stopping it"
    kw_node_down "$n" || kw_die "node $n could not be stopped cleanly (above)"
    "$BIN/kubectl" --kubeconfig "$KW_RUN_DIR/kubeconfig" delete node "$n" --ignore-not-found >&2
  fi
done
if [ ${#KW_NODES[@]} -eq 0 ] && [ -z "$(kw_nodes_running)" ]; then
  kw_bridge_down || true
fi
image_up_to_date

kw_log "stack up in $(($(date +%s) - start_all))s (run folder $KW_RUN_DIR)"
emit
