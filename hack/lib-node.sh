# shellcheck shell=bash
# The test stack's nodes: each a kubelet with a containerd (and runc) of its
# own on one loopback address of this machine, registered with the stack's
# API server under that address as its name. Sourced by hack/lib.sh; defines
# functions and variables only.
#
# A node is its address: 127.0.0.1 and 127.0.0.2 by default
# (KWATCH_NODES=127.0.0.1,127.0.0.2; "none" for a control plane alone). Its
# kubelet serves on ADDRESS:10250 (the API server reaches it there for logs,
# exec and attach) and ADDRESS:10248 (healthz), containerd's CRI streaming
# server on ADDRESS and a port of the kernel's choosing. A second stack beside
# the first takes other addresses (KWATCH_NODES=127.0.0.3,127.0.0.4), a
# bridge and subnet of its own (below) and its own KWATCH_CLUSTER_DIR.
#
# Per node N, everything lives under $KW_RUN_DIR/nodes/N/:
#   containerd.toml, containerd.sock (+ .ttrpc), crictl.yaml, containerd/{root,state}
#     (images, snapshots, the pods' network namespaces under state/netns),
#   runc/ (runc's state), kubelet/ (the kubelet's --root-dir, bind-mounted
#     on itself by the kubelet; its pki/), kubelet.yaml, kubelet.kubeconfig,
#   pod-logs/ (podLogsDir), volume-plugins/, cni/net.d (the network
#     config), cni/ipam (host-local's allocations),
# and its processes in the cgroup /kwatch/N of every hierarchy: containerd,
# the kubelet and the shims in /kwatch/N/system, the pods in
# /kwatch/N/kubepods (the kubelet's cgroupRoot is /kwatch/N), so that
# cluster-down.sh finds and stops every process of a node, and checks that
# none is left, by its cgroup.
#
# Outside those: the pod network's bridge (KW_POD_BRIDGE, its alias naming
# the run folder that owns it), the kubelet's container log links in
# /var/log/containers (a fixed path in the kubelet), libcni's result cache in
# /var/lib/cni/results and the shims' sockets in /run/containerd/s (fixed
# paths in containerd and libcni): cluster-down.sh removes this stack's
# entries.

kw_split_nodes() {
  local v="${KWATCH_NODES-127.0.0.1,127.0.0.2}"
  [ "$v" = none ] && return 0
  tr ', ' '\n\n' <<<"$v" | sed '/^$/d'
}
mapfile -t KW_NODES < <(kw_split_nodes)

# The pod network: one bridge per stack, with the first address of a /24 on
# it, each node taking a range of the rest for its pods (host-local IPAM).
# Pods get no default route: they reach this machine's bridge address and one
# another, nothing beyond it, and this machine's IP forwarding is left as it
# is (off here). Pods with hostNetwork (kwatch's own) do not use it; it makes
# the nodes Ready and lets ordinary pods run.
KW_POD_BRIDGE="${KWATCH_POD_BRIDGE:-kwatch0}"
KW_POD_SUBNET="${KWATCH_POD_SUBNET:-10.88.0.0/24}"
# kube-scheduler's secure port (/healthz, /metrics), as kube-controller-manager's.
KW_SCHEDULER_PORT="${KWATCH_SCHEDULER_PORT:-10259}"
KW_KUBELET_PORT=10250
KW_KUBELET_HEALTHZ_PORT=10248
# The cgroup (in every hierarchy) that holds the nodes' processes.
KW_NODE_CGROUP_BASE=/kwatch

kw_node_dir() { echo "$KW_RUN_DIR/nodes/$1"; }
kw_node_cgroup() { echo "$KW_NODE_CGROUP_BASE/$1"; }
kw_node_sock() { echo "$(kw_node_dir "$1")/containerd.sock"; }

# kw_check_node_settings: the variables above make sense, said before
# anything starts.
kw_check_node_settings() {
  local n i
  for n in "${KW_NODES[@]}"; do
    [[ "$n" =~ ^127\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] ||
      kw_die "KWATCH_NODES: $n is not a loopback address (127.x.y.z): a node of this stack is an address of this machine's lo"
  done
  [ "$(printf '%s\n' "${KW_NODES[@]}" | sort | uniq -d)" = "" ] || kw_die "KWATCH_NODES names a node twice: ${KW_NODES[*]}"
  [ "${#KW_NODES[@]}" -le 7 ] || kw_die "KWATCH_NODES: at most 7 nodes (each takes 32 addresses of $KW_POD_SUBNET)"
  [[ "$KW_POD_SUBNET" =~ ^([0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})\.0/24$ ]] ||
    kw_die "KWATCH_POD_SUBNET=$KW_POD_SUBNET: want a /24 such as 10.88.0.0/24"
  [ "${#KW_POD_BRIDGE}" -le 15 ] && [[ "$KW_POD_BRIDGE" =~ ^[a-zA-Z0-9_-]+$ ]] ||
    kw_die "KWATCH_POD_BRIDGE=$KW_POD_BRIDGE: want an interface name of at most 15 letters, digits, - or _"
  # unix socket paths are limited to 108 bytes (sun_path).
  for n in "${KW_NODES[@]}"; do
    i="$(kw_node_sock "$n").ttrpc"
    [ "${#i}" -lt 108 ] || kw_die "the socket path $i is too long for a unix socket: choose a shorter KWATCH_CLUSTER_DIR"
  done
}

# kw_pod_prefix: "10.88.0" of KW_POD_SUBNET.
kw_pod_prefix() { echo "${KW_POD_SUBNET%.0/24}"; }

# kw_cgroup_hierarchies: the mounted cgroup hierarchies (v1 controllers and,
# on a hybrid machine, the unified one), one folder per line.
kw_cgroup_hierarchies() {
  local d
  for d in /sys/fs/cgroup/*/; do
    [ -f "$d/cgroup.procs" ] && echo "${d%/}"
  done
  [ -f /sys/fs/cgroup/cgroup.procs ] && echo /sys/fs/cgroup
  return 0
}

# kw_cgroup_make PATH: PATH (e.g. /kwatch/127.0.0.1/system) in every
# hierarchy; in cpuset, each new level gets its parent's cpus and mems (an
# empty cpuset takes no process).
kw_cgroup_make() {
  local h p rel parent
  while read -r h; do
    rel=""
    for p in $(tr '/' ' ' <<<"$1"); do
      parent="$h$rel"
      rel="$rel/$p"
      [ -d "$h$rel" ] || mkdir "$h$rel"
      if [ -f "$h$rel/cpuset.cpus" ] && [ -z "$(cat "$h$rel/cpuset.cpus")" ]; then
        cat "$parent/cpuset.cpus" >"$h$rel/cpuset.cpus"
        cat "$parent/cpuset.mems" >"$h$rel/cpuset.mems"
      fi
    done
  done < <(kw_cgroup_hierarchies)
}

# kw_cgroup_pids PATH: the pids in PATH and below it, in any hierarchy.
kw_cgroup_pids() {
  local h
  while read -r h; do
    [ -d "$h$1" ] && find "$h$1" -name cgroup.procs -exec cat {} + 2>/dev/null
  done < <(kw_cgroup_hierarchies) | sort -un
}

# kw_cgroup_dirs PATH: the folders of PATH and below it, in every hierarchy.
kw_cgroup_dirs() {
  local h
  while read -r h; do
    [ -d "$h$1" ] && find "$h$1" -type d
  done < <(kw_cgroup_hierarchies)
  return 0
}

# kw_node_shims N: the pids of containerd-shim-runc-v2 processes of N's
# containerd (its -address argument), wherever they are.
kw_node_shims() {
  local sock p
  sock="$(kw_node_sock "$1")"
  # The shim's command name is its file name cut to 15 bytes.
  for p in $(pgrep -x containerd-shim 2>/dev/null); do
    tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -qxF -- "$sock" && echo "$p"
  done | sort -un
}

# kw_mounts_under DIR: the mount points at or below DIR, deepest first.
kw_mounts_under() {
  # /proc/self/mountinfo's 5th field, with spaces and the like octal-escaped.
  awk -v d="$1" '{ m = $5; gsub(/\\040/, " ", m); if (m == d || index(m, d "/") == 1) print length(m) "\t" m }' /proc/self/mountinfo |
    sort -rn | cut -f2- | uniq
}

# kw_node_leftovers N: what of node N is still on this machine (processes,
# mounts, cgroups, shim sockets, log links), one line each; nothing when it
# is all gone.
kw_node_leftovers() {
  local n="$1" dir cg p
  dir="$(kw_node_dir "$n")"
  cg="$(kw_node_cgroup "$n")"
  for p in $(kw_cgroup_pids "$cg") $(kw_node_shims "$n"); do
    echo "process $p ($(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-120)) in cgroup $(grep -m1 ':pids:\|:memory:' "/proc/$p/cgroup" 2>/dev/null | cut -d: -f3)"
  done | sort -u
  kw_mounts_under "$dir" | sed 's/^/mount /'
  kw_cgroup_dirs "$cg" | sed 's/^/cgroup /'
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$dir/*" | sed 's/^/log link /'
  fi
}

# kw_node_down N: stop node N and remove what it made: its pods through the
# CRI (crictl rmp: containers stopped, the network torn down, sandboxes
# removed, as the kubelet would), the kubelet, containerd, anything left in
# its cgroup (frozen, then killed), its mounts (the kubelet's bind mount of
# its root dir, volumes, containerd's rootfs and shm mounts, network
# namespaces), its cgroups in every hierarchy, its shim sockets and its log
# links. Returns 1, listing them, if anything is left.
kw_node_down() {
  local n="$1" dir cg sock bin pids p socks m left h i
  dir="$(kw_node_dir "$n")"
  cg="$(kw_node_cgroup "$n")"
  sock="$(kw_node_sock "$n")"
  bin="$(kw_bin_dir)"
  kw_stop "kubelet-$n" || true
  if kw_pid_alive "containerd-$n" && [ -x "$bin/crictl" ]; then
    kw_log "node $n: removing its pods (crictl rmp --all --force)"
    timeout 90 "$bin/crictl" --config "$dir/crictl.yaml" rmp --all --force >&2 ||
      kw_log "node $n: crictl rmp failed; what is left is killed below"
  fi
  # The shims' sockets (in containerd's fixed /run/containerd/s), to remove
  # if a shim has to be killed.
  socks=()
  for p in $(kw_node_shims "$n"); do
    mapfile -t -O "${#socks[@]}" socks < <(ss -xlpn 2>/dev/null | awk -v p="pid=$p," 'index($0, p) { print $5 }' | grep '^/')
  done
  kw_stop "containerd-$n" || true
  # Whatever still runs there: the shims, pods' processes.
  pids="$({ kw_cgroup_pids "$cg"; kw_node_shims "$n"; } | sort -un)"
  if [ -n "$pids" ]; then
    kw_log "node $n: killing what is left of it: $(tr '\n' ' ' <<<"$pids")"
    h="/sys/fs/cgroup/freezer$cg"
    [ -f "$h/freezer.state" ] && echo FROZEN >"$h/freezer.state" 2>/dev/null
    for p in $pids; do kill -KILL "$p" 2>/dev/null || true; done
    [ -f "$h/freezer.state" ] && echo THAWED >"$h/freezer.state" 2>/dev/null
    for i in $(seq 50); do
      [ -z "$(kw_cgroup_pids "$cg"; kw_node_shims "$n")" ] && break
      sleep 0.2
    done
  fi
  for m in "${socks[@]}"; do rm -f "$m"; done
  while read -r m; do
    [ -n "$m" ] || continue
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || kw_log "node $n: cannot unmount $m"
  done < <(kw_mounts_under "$dir")
  # Deepest first: a cgroup goes only once its children have.
  kw_cgroup_dirs "$cg" | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2- |
    while read -r m; do rmdir "$m" 2>/dev/null || true; done
  while read -r h; do rmdir "$h$KW_NODE_CGROUP_BASE" 2>/dev/null || true; done < <(kw_cgroup_hierarchies)
  if [ -d /var/log/containers ]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$dir/*" -delete
  fi
  left="$(kw_node_leftovers "$n")"
  if [ -n "$left" ]; then
    kw_log "node $n: LEFT BEHIND:"
    sed 's/^/  /' <<<"$left" >&2
    return 1
  fi
  return 0
}

# kw_bridge_owner: the run folder that owns KW_POD_BRIDGE (its alias), ""
# if there is no such bridge.
kw_bridge_owner() {
  ip -o link show dev "$KW_POD_BRIDGE" >/dev/null 2>&1 || return 0
  ip -d link show dev "$KW_POD_BRIDGE" | awk '$1 == "alias" { sub(/^ *alias /, ""); print; exit }'
}

# kw_bridge_up: KW_POD_BRIDGE with the subnet's first address, owned by this
# run folder.
kw_bridge_up() {
  local owner
  command -v ip >/dev/null || kw_die "ip is required for the pod network (apt-get install iproute2)"
  owner="$(kw_bridge_owner)"
  if ip -o link show dev "$KW_POD_BRIDGE" >/dev/null 2>&1; then
    [ "$owner" = "$KW_RUN_DIR" ] ||
      kw_die "the bridge $KW_POD_BRIDGE belongs to ${owner:-something else than a kwatch stack}: give this stack another one (KWATCH_POD_BRIDGE=… KWATCH_POD_SUBNET=…)"
  else
    kw_log "creating the pod network's bridge $KW_POD_BRIDGE ($(kw_pod_prefix).1/24)"
    ip link add "$KW_POD_BRIDGE" type bridge
    ip link set dev "$KW_POD_BRIDGE" alias "$KW_RUN_DIR"
  fi
  ip addr replace "$(kw_pod_prefix).1/24" dev "$KW_POD_BRIDGE"
  ip link set dev "$KW_POD_BRIDGE" up
}

# kw_bridge_down: remove this stack's bridge (the pods' veths went with their
# network namespaces) and libcni's cached results for its network.
kw_bridge_down() {
  if [ "$(kw_bridge_owner)" = "$KW_RUN_DIR" ]; then
    ip link del "$KW_POD_BRIDGE" || return 1
  fi
  rm -f /var/lib/cni/results/"$KW_POD_BRIDGE"-* 2>/dev/null
  return 0
}

# kw_write_node_config N INDEX: containerd's and the kubelet's configuration
# and the CNI network of node N, the INDEX-th node (0-based).
kw_write_node_config() {
  local n="$1" idx="$2" dir bin prefix
  dir="$(kw_node_dir "$n")"
  bin="$(kw_bin_dir)"
  prefix="$(kw_pod_prefix)"
  mkdir -p "$dir/containerd" "$dir/runc" "$dir/kubelet" "$dir/pod-logs" "$dir/volume-plugins" "$dir/cni/net.d" "$dir/cni/ipam"
  # containerd 2.4 (config version 4; `containerd config default` lists
  # every key). Settings this machine needs: restrict_oom_score_adj (root
  # lacks CAP_SYS_RESOURCE, so runc may not lower oom_score_adj), cgroupfs
  # (no systemd). Every path and socket is the node's own; NRI (a fixed
  # /var/run/nri socket) and the opt plugin (/opt/containerd) are off; CDI
  # reads no spec folders.
  cat >"$dir/containerd.toml" <<EOF
version = 4
root = '$dir/containerd/root'
state = '$dir/containerd/state'
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.internal.v1.opt']
imports = []

[plugins.'io.containerd.server.v1.grpc']
  address = '$dir/containerd.sock'
[plugins.'io.containerd.server.v1.ttrpc']
  address = '$dir/containerd.sock.ttrpc'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '$KW_PAUSE_IMAGE'

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '$bin/runc'
      Root = '$dir/runc'
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/usr/lib/cni']
    conf_dir = '$dir/cni/net.d'
    use_internal_loopback = true

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '$n'
  stream_server_port = '0'
EOF
  # crictl's (`crictl --config RUN/nodes/N/crictl.yaml ps`).
  cat >"$dir/crictl.yaml" <<EOF
runtime-endpoint: unix://$dir/containerd.sock
image-endpoint: unix://$dir/containerd.sock
timeout: 60
EOF
  # Debian's containernetworking-plugins: bridge with host-local IPAM; the
  # bridge is kw_bridge_up's (isGateway false: the plugin neither addresses
  # it nor turns on IP forwarding), no routes beyond the subnet.
  cat >"$dir/cni/net.d/10-kwatch.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$KW_POD_BRIDGE",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$KW_POD_BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$KW_POD_SUBNET", "rangeStart": "$prefix.$((idx * 32 + 2))", "rangeEnd": "$prefix.$((idx * 32 + 31))"}]]
      }
    }
  ]
}
EOF
  # The kubelet (KubeletConfiguration v1beta1). This machine: cgroup v1
  # (failCgroupV1: false), no systemd (cgroupfs). The node's own addresses,
  # folders and cgroup root. The API server's requests (logs, exec, attach)
  # are authenticated by its client certificate (x509) and authorized with a
  # SubjectAccessReview, as on kubeadm's nodes; anonymous requests are
  # refused. Eviction and image garbage collection only at a nearly full
  # disk: the images are imported, not pulled, and a busy CI disk must not
  # evict test pods or delete kwatch's image. resolvConf "": pods get no
  # name servers of this machine's.
  cat >"$dir/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $n
port: $KW_KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: $n
healthzPort: $KW_KUBELET_HEALTHZ_PORT
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $KW_RUN_DIR/pki/kubelet-client-ca.crt
authorization:
  mode: Webhook
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: $(kw_node_cgroup "$n")
containerRuntimeEndpoint: unix://$dir/containerd.sock
podLogsDir: $dir/pod-logs
volumePluginDir: $dir/volume-plugins
resolvConf: ""
failSwapOn: false
maxPods: 30
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
EOF
}

# kw_node_pki: the CA that the kubelets trust for client certificates, and
# kube-apiserver's client certificate from it (--kubelet-client-certificate).
kw_node_pki() {
  local p="$KW_RUN_DIR/pki"
  if [ ! -s "$p/kubelet-client-ca.crt" ] || [ ! -s "$p/apiserver-kubelet-client.crt" ]; then
    kw_log "generating the kubelets' client CA and kube-apiserver's client certificate"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=kwatch-kubelet-client-ca" -keyout "$p/kubelet-client-ca.key" -out "$p/kubelet-client-ca.crt" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" -keyout "$p/apiserver-kubelet-client.key" -out "$p/apiserver-kubelet-client.csr" 2>/dev/null
    openssl x509 -req -in "$p/apiserver-kubelet-client.csr" -CA "$p/kubelet-client-ca.crt" -CAkey "$p/kubelet-client-ca.key" \
      -CAcreateserial -days 3650 -out "$p/apiserver-kubelet-client.crt" \
      -extfile <(printf 'keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n') 2>/dev/null
    rm -f "$p/apiserver-kubelet-client.csr" "$p/kubelet-client-ca.srl"
    chmod 600 "$p"/*.key
  fi
}

kw_kubelet_healthy() {
  [ "$(curl -sS --max-time 3 "http://$1:$KW_KUBELET_HEALTHZ_PORT/healthz" 2>/dev/null)" = ok ]
}
kw_containerd_serves() {
  "$(kw_bin_dir)/ctr" --address "$(kw_node_sock "$1")" --timeout 3s version >/dev/null 2>&1
}
# kw_node_ready N: the API server has node N with the condition Ready=True.
kw_node_ready() {
  [ "$("$(kw_bin_dir)/kubectl" --kubeconfig "$KW_RUN_DIR/kubeconfig" get node "$1" \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# kw_nodes_healthy: every node's containerd and kubelet are ours, alive, and
# answer.
kw_nodes_healthy() {
  local n
  for n in "${KW_NODES[@]}"; do
    kw_pid_alive "containerd-$n" && kw_pid_alive "kubelet-$n" && kw_kubelet_healthy "$n" || return 1
  done
}

# kw_nodes_running: the nodes of this run folder with a process recorded
# (those of KWATCH_NODES and any started with another setting).
kw_nodes_running() {
  local f n
  for f in "$KW_RUN_DIR"/containerd-*.pid "$KW_RUN_DIR"/kubelet-*.pid; do
    [ -e "$f" ] || continue
    n="${f##*/}"; n="${n%.pid}"; n="${n#containerd-}"; n="${n#kubelet-}"
    echo "$n"
  done | sort -u
}

# kw_image_import N TAR: import the OCI layout tarball TAR (hack/image) into
# node N's containerd (namespace k8s.io, the CRI's) unless it holds the image
# under the same name and digest already (the name and digest of TAR's
# index.json), and pin it (io.cri-containerd.pinned: the kubelet's image
# garbage collection leaves it).
kw_image_import() {
  local n="$1" tar="$2" ctr index name want have out
  ctr=("$(kw_bin_dir)/ctr" --address "$(kw_node_sock "$n")" -n k8s.io)
  index="$(tar -xOf "$tar" index.json)" || return 1
  name="$(grep -o '"io.containerd.image.name": *"[^"]*"' <<<"$index" | sed 's/.*: *"\(.*\)"/\1/')"
  want="$(grep -o '"digest": *"sha256:[0-9a-f]*"' <<<"$index" | grep -o 'sha256:[0-9a-f]*' | head -n1)"
  [ -n "$name" ] && [ -n "$want" ] || { kw_log "$tar: no image name or digest in its index.json"; return 1; }
  have="$("${ctr[@]}" images ls "name==$name" 2>/dev/null | awk 'NR > 1 { print $3 }')"
  if [ "$want" = "$have" ]; then
    return 0
  fi
  kw_log "node $n: importing $name ($want)"
  # ctr warns on stderr that cgroup v1 is deprecated: shown only on failure.
  if ! out="$("${ctr[@]}" images import "$tar" 2>&1 &&
    "${ctr[@]}" images label "$name" io.cri-containerd.pinned=pinned 2>&1)"; then
    printf '%s\n' "$out" >&2
    return 1
  fi
}
