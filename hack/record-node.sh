#!/usr/bin/env bash
# Record a node-style capture of the stack on lo: what tcpdump on a control
# plane node sees of port 6443 and kubectl proxy's port 8001.
#   hack/record-node.sh [OUT_DIR]      (default testdata/captures)
# writes OUT_DIR/node-lo.pcap and OUT_DIR/node.keys.log. The capture starts
# while kube-controller-manager's and kube-apiserver's own long-lived TLS
# connections are open (joined after their handshakes), then holds:
#   - the stack's kubectl get -w, straight to 6443, without a key log;
#   - kwatch stream --http2 --tls-keylog straight to 6443 (client-go, TLS 1.3
#     and HTTP/2 as an informer has them): its keys are node.keys.log;
#   - curl -N through kubectl proxy (plain HTTP on 8001), and the proxy's
#     own TLS connection to 6443, without a key log;
# while a ConfigMap is created, changed and deleted in namespace nodecap.
# Needs the stack of hack/cluster-up.sh to be up, and root for tcpdump.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"
kw_stack_healthy || kw_die "the control plane is not up: run make cluster-up (hack/cluster-up.sh) first"
# shellcheck disable=SC1091
set -a; source "$KW_RUN_DIR/env"; set +a
OUT_DIR="${1:-$KW_REPO_ROOT/testdata/captures}"
mkdir -p "$OUT_DIR"
KUBECTL="$KW_RUN_DIR/bin/kubectl"
NS=nodecap
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

"$KUBECTL" create namespace "$NS" >/dev/null 2>&1 || true
( cd "$KW_REPO_ROOT" && go build -o "$work/kwatch" . )

tcpdump -i lo -s 0 -U --immediate-mode -B 65536 -w "$work/node-lo.pcap" 'tcp port 6443 or tcp port 8001' 2>/dev/null &
tcpdump_pid=$!
sleep 1
"$KUBECTL" -n "$NS" get configmaps -w --output-watch-events >/dev/null 2>&1 &
pids+=($!)
"$work/kwatch" stream configmaps -n "$NS" --http2 --tls-keylog "$work/node.keys.log" >/dev/null 2>&1 &
pids+=($!)
curl -sN "$PROXY_URL/api/v1/namespaces/$NS/configmaps?watch=1" >/dev/null &
pids+=($!)
sleep 2
"$KUBECTL" -n "$NS" create configmap node-a --from-literal=k=v >/dev/null
sleep 0.5
"$KUBECTL" -n "$NS" patch configmap node-a -p '{"data":{"k":"w"}}' >/dev/null
sleep 0.5
"$KUBECTL" -n "$NS" delete configmap node-a >/dev/null
sleep 1
# SIGTERM: a background job of a script ignores SIGINT.
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait "${pids[@]}" 2>/dev/null || true
pids=()
sleep 1
kill -INT "$tcpdump_pid"
wait "$tcpdump_pid" 2>/dev/null || true
cp "$work/node-lo.pcap" "$work/node.keys.log" "$OUT_DIR/"
kw_log "wrote $OUT_DIR/node-lo.pcap and $OUT_DIR/node.keys.log"
