#!/usr/bin/env bash
# Stop the stack started by cluster-up.sh, by the pids it recorded in the run
# folder. The nodes first, each removing what it made (hack/lib-node.sh
# kw_node_down: its pods through the CRI, the kubelet, containerd, whatever
# is left in its cgroup, its mounts, cgroups, shim sockets and log links),
# then the pod network's bridge; then the proxy, kube-scheduler and
# kube-controller-manager (clients of the API server go first), then
# kube-apiserver, and etcd last (the API server needs it to shut down
# cleanly). Each process gets SIGTERM, up to 10 s, then SIGKILL.
#
# At the end it checks that no node left a process, mount, cgroup or log link
# behind (the pods' network namespaces are mounts under the node's folder),
# lists what it finds, and exits 1 if anything is left.
#
# Idempotent: nothing recorded, nothing to do. The run folder (logs,
# certificates, kubeconfig) stays for post-mortems; the env file goes, so
# nobody mistakes the stopped stack for a running one.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

if [ ! -d "$KW_RUN_DIR" ]; then
  kw_log "nothing to stop (no run folder $KW_RUN_DIR)"
  exit 0
fi

rc=0
mapfile -t nodes < <({ printf '%s\n' "${KW_NODES[@]}"; kw_nodes_running; } | sed '/^$/d' | sort -u)
for n in "${nodes[@]}"; do
  [ -d "$(kw_node_dir "$n")" ] || continue
  kw_node_down "$n" || rc=1
done
kw_bridge_down || { kw_log "cannot remove the bridge $KW_POD_BRIDGE"; rc=1; }
for name in proxy kube-scheduler kube-controller-manager kube-apiserver etcd; do
  kw_stop "$name" || rc=1
done
rm -f "$KW_RUN_DIR/env"
if [ "$rc" -eq 0 ]; then
  kw_log "stack stopped; nothing left behind"
fi
exit "$rc"
