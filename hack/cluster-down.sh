#!/usr/bin/env bash
# Stop the control plane started by cluster-up.sh, by the pids it recorded in
# the run folder: the proxy and kube-controller-manager first (clients of the
# API server go first), then kube-apiserver, and etcd last (the API server
# needs it to shut down cleanly). Each gets SIGTERM, up to 10 s, then SIGKILL.
# Idempotent: nothing recorded, nothing to do.
# The run folder (logs, certificates, kubeconfig) stays for post-mortems; the
# env file goes, so nobody mistakes the stopped stack for a running one.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

if [ ! -d "$KW_RUN_DIR" ]; then
  kw_log "nothing to stop (no run folder $KW_RUN_DIR)"
  exit 0
fi

rc=0
for name in proxy kube-controller-manager kube-apiserver etcd; do
  kw_stop "$name" || rc=1
done
rm -f "$KW_RUN_DIR/env"
if [ "$rc" -eq 0 ]; then
  kw_log "control plane stopped"
fi
exit "$rc"
