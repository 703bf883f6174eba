#!/usr/bin/env bash
# What following a watch live costs (make bench-live): kwatch pcap -i lo and
# kwatch attach decoding one watch of EVENTS MODIFIED events that
# bench/replay sends at RATE events a second, with the CPU kwatch takes
# (user+sys, from /usr/bin/time and from /proc/PID/stat while the events
# flow), its peak RSS, the events it decoded (its summary's count, against
# the client's) and the packets the kernel dropped (the "packets dropped by
# the kernel" problem, which kwatch reports whenever the count is not 0).
# Needs root (a packet socket, the uprobe). Prints a markdown table; the
# raw numbers are in bench/out/live.tsv, and kwatch's output of a run that
# missed events in bench/out/live-CONFIG-RUN.*. The results are written up
# by hand in bench/RESULTS.md.
#
#   RUNS=3          runs of each configuration, alternated; medians reported
#   EVENTS=100000   events of the watch (EVENTS/RATE seconds of stream)
#   RATE=10000      events a second
#   PRETTY_RUNS=1   runs with kwatch's default (pretty) output to a file
#   CHURN_RATE=1000 connections a second bench/churn opens and closes in the
#                   busy configurations
#   APISERVER_SECONDS=60  how long attach-apiserver follows kube-apiserver
#   CONFIGS="..."   the configurations to run (default: all but
#                   attach-busy-proc, listed below)
#   KWATCH=PATH     measure this kwatch binary instead of building one
#   TABLE_ONLY=1    print the tables of the last run's bench/out/live.tsv
#
# Configurations, each against a fresh bench/replay (it serves one watch):
#   plain         bench/client over HTTP on 127.0.0.1:18080, no kwatch
#   pcap          the same, with kwatch pcap -i lo --port 18080 -o json
#   tls-h2        bench/client over TLS (HTTP/2) on 127.0.0.1:8443, no kwatch
#   attach-h2     the same, with kwatch attach --exe bench/out/client -o json
#   tls-h1        bench/client -http1 (TLS, HTTP/1.1), no kwatch
#   attach-h1     the same, with kwatch attach
#   attach-busy   attach-h2 on a busy node: meanwhile bench/churn opens and
#                 closes CHURN_RATE TCP connections a second to the API
#                 server's port and kubectl proxy's (the stack's: it is
#                 started if it is not up), as a node's probes and
#                 short-lived clients do
#   attach-proc, attach-busy-proc  attach-h2 and attach-busy with
#                 KWATCH_ATTACH_OWNERS=proc (the /proc fallback: a socket
#                 scan per new connection); not in the default list
#                 (attach-busy-proc takes a core)
#   kubectl-create  ten `kubectl create configmap` runs (the stack's
#                 kubectl, straight to the API server, about 100 ms each)
#                 under kwatch attach --exe KUBECTL --all-http -o json: the
#                 POSTs shown and decrypted, each kubectl's time, kwatch's
#                 CPU (its own table)
#   kubectl-create-proc  the same with KWATCH_ATTACH_OWNERS=proc; not in the
#                 default list
#   attach-apiserver  kwatch attach kube-apiserver -o json on the stack
#                 (started if it is not up) for APISERVER_SECONDS, its own
#                 clients' traffic (kube-controller-manager, the kubelets,
#                 the scheduler, kubectl proxy) and a ConfigMap created and
#                 deleted every second: kwatch's RSS sampled every second
#                 (the median of the second half: steady; VmHWM: peak) and
#                 its CPU (its own table)
#   pcap-pretty, attach-pretty: pcap and attach-h2 with the pretty output
# Port 8443 is one that kwatch attach captures from the start
# (attach.DefaultPorts) with the /proc fallback; another port would be
# learned from the client's SYN. With the kernel telling connection owners
# (pkg/sockowner) every port is followed from its first packet.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
EVENTS="${EVENTS:-100000}"
RATE="${RATE:-10000}"
PRETTY_RUNS="${PRETTY_RUNS:-1}"
CHURN_RATE="${CHURN_RATE:-1000}"
APISERVER_SECONDS="${APISERVER_SECONDS:-60}"
read -r -a CONFIGS <<<"${CONFIGS:-plain pcap tls-h2 attach-h2 attach-busy tls-h1 attach-h1 kubectl-create attach-apiserver pcap-pretty attach-pretty}"
OUT=bench/out
mkdir -p "$OUT"
if [ "$(id -u)" != 0 ]; then
  echo "bench/live.sh needs root: kwatch pcap -i opens a packet socket, kwatch attach a uprobe" >&2
  exit 2
fi
[ -x /usr/bin/time ] || { echo "installing time from Debian" >&2; apt-get update -qq && apt-get install -y -qq time >/dev/null; }

# median: the median of the numbers on stdin, one a line.
median() { sort -n | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

if [ "${TABLE_ONLY:-}" != 1 ]; then
echo "building" >&2
if [ -z "${KWATCH:-}" ]; then
  go build -trimpath -o "$OUT/kwatch" .
  KWATCH=$OUT/kwatch
fi
go build -o "$OUT/replay" ./bench/replay
go build -o "$OUT/client" ./bench/client
go build -o "$OUT/churn" ./bench/churn
CLIENT=$(realpath "$OUT/client")
PLAIN=127.0.0.1:18080
TLSADDR=127.0.0.1:8443
WATCH="/api/v1/namespaces/default/configmaps?watch=1"

rpid=
kpid=
cpid=
cleanup() {
  if [ -n "$kpid" ]; then kill "$kpid" 2>/dev/null || true; fi
  if [ -n "$rpid" ]; then kill "$rpid" 2>/dev/null || true; fi
  if [ -n "$cpid" ]; then kill "$cpid" 2>/dev/null || true; fi
}
trap cleanup EXIT

# The stack (hack/cluster-up.sh: started if it is not up, reused if it is)
# for the busy configurations' churn targets, kubectl-create and
# attach-apiserver.
STACK=
need_stack() {
  [ -n "$STACK" ] && return
  echo "starting or reusing the stack (hack/cluster-up.sh)" >&2
  eval "$(hack/cluster-up.sh | sed 's/^/export /')"
  STACK=1
  APISERVER=127.0.0.1:${KWATCH_APISERVER_PORT:-6443}
  PROXY=${PROXY_URL#http://}
  KUBECTL=$(readlink -f "$(dirname "$KUBECONFIG")/bin/kubectl")
}
for cfg in "${CONFIGS[@]}"; do
  case $cfg in attach-busy* | kubectl-create* | attach-apiserver) need_stack ;; esac
done

# cputicks PID: user+sys clock ticks of PID so far (/proc/PID/stat fields
# 14 and 15; the command name, field 2, holds no space here).
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# tcpopens: the TCP connections this network namespace's processes have
# opened (ActiveOpens of /proc/net/snmp). Every connection's SYN goes
# through the kernel filter of kwatch attach, which looks the connection
# up: other processes' connections cost it CPU.
tcpopens() { awk '$1 == "Tcp:" && $6 ~ /^[0-9]+$/ {print $6}' /proc/net/snmp; }
# statuskb PID FIELD: a /proc/PID/status field in kB.
statuskb() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }
HZ=$(getconf CLK_TCK)

# run_one CONFIG RUN: one run; appends a line to live.tsv:
# config run load1 stream_s client_cpu_s client_rss_kb client_events
# kwatch_wall_s kwatch_cpu_s kwatch_stream_cpu_s kwatch_rss_kb
# kwatch_anon_kb kwatch_events drops tcp_opens_per_s
run_one() {
  local cfg=$1 run=$2 addr url copt=() kw=() kout=/dev/null
  local load1
  load1=$(cut -d' ' -f1 /proc/loadavg)
  local kenv=() churn=-
  case $cfg in
    plain | pcap | pcap-pretty) addr=$PLAIN; url="http://$addr$WATCH" ;;
    *) addr=$TLSADDR; url="https://$addr$WATCH" ;;
  esac
  case $cfg in
    *-h1) copt=(-http1) ;;
  esac
  case $cfg in
    pcap) kw=(pcap -i lo --port 18080 -o json) ;;
    pcap-pretty) kw=(pcap -i lo --port 18080); kout=$OUT/live-$cfg-$run.txt ;;
    attach-h2 | attach-h1 | attach-busy) kw=(attach --exe "$CLIENT" -o json) ;;
    attach-proc | attach-busy-proc) kw=(attach --exe "$CLIENT" -o json); kenv=(KWATCH_ATTACH_OWNERS=proc) ;;
    attach-pretty) kw=(attach --exe "$CLIENT"); kout=$OUT/live-$cfg-$run.txt ;;
  esac
  if [ "${#kw[@]}" -gt 0 ] && [ "$kout" = /dev/null ]; then
    # Not /dev/null: the file keeps the summary (the event count) and the
    # problems (the drops); it is in the page cache, about 25 MB a run.
    kout=$OUT/live-$cfg-$run.json
  fi

  local ropt=()
  [ "$addr" = "$TLSADDR" ] && ropt=(-tls)
  "$OUT/replay" -addr "$addr" -events "$EVENTS" -rate "$RATE" "${ropt[@]}" 2>"$OUT/live-replay.err" & rpid=$!
  for _ in $(seq 100); do curl -fsk "${url%%/api/*}/api" >/dev/null 2>&1 && break; sleep 0.05; done

  local tpid=
  if [ "${#kw[@]}" -gt 0 ]; then
    # Emptied here first: kwatch's own redirection may come after the
    # wait below has read what a previous run left.
    : >"$OUT/live-$cfg-$run.err"
    env "${kenv[@]}" /usr/bin/time -f "%e %U %S %M" -o "$OUT/live-ktime.txt" "$KWATCH" "${kw[@]}" >"$kout" 2>"$OUT/live-$cfg-$run.err" & tpid=$!
    # kwatch's pid, then its capture (or uprobe) in place: for pcap -i, the
    # ring mapped (the socket is listed by ss -0 before its ring is set up,
    # and packets that come meanwhile are not captured); for attach, the
    # line it writes once its uprobe and its capture are in place.
    kpid=
    # (env execs /usr/bin/time: kwatch is its child.)
    for _ in $(seq 100); do kpid=$(pgrep -P "$tpid" || true); [ -n "$kpid" ] && break; sleep 0.05; done
    [ -n "$kpid" ] || { echo "kwatch did not start" >&2; exit 1; }
    local ready=
    for _ in $(seq 600); do
      case $cfg in
        pcap*) grep -q 'socket:\[' "/proc/$kpid/maps" 2>/dev/null && ready=1 ;;
        attach*) grep -q "attached to every process of" "$OUT/live-$cfg-$run.err" && ready=1 ;;
      esac
      [ -n "$ready" ] && break
      sleep 0.05
    done
    [ -n "$ready" ] || { echo "$cfg run $run: kwatch not ready after 30 s" >&2; exit 1; }
  fi

  if [ "${cfg#attach-busy}" != "$cfg" ]; then
    # The churn runs from before the client starts to after it ends.
    "$OUT/churn" -rate "$CHURN_RATE" -addr "$APISERVER,$PROXY" >"$OUT/live-churn.out" & cpid=$!
    sleep 1
  fi
  local k0=0 k1=0 anon=0
  [ -n "$kpid" ] && k0=$(cputicks "$kpid")
  local o0 o1
  o0=$(tcpopens)
  /usr/bin/time -f "%e %U %S %M" -o "$OUT/live-ctime.txt" "$CLIENT" "${copt[@]}" -url "$url" >"$OUT/live-client.out"
  o1=$(tcpopens)
  if [ -n "$cpid" ]; then
    kill -INT "$cpid"
    wait "$cpid" || true
    cpid=
    # "N connections in S s (R/s), E failed"
    churn=$(awk '{gsub(/[(),\/s]/, "", $6); print $6}' "$OUT/live-churn.out")
  fi
  if [ -n "$kpid" ]; then
    k1=$(cputicks "$kpid")
    anon=$(statuskb "$kpid" RssAnon)
    sleep 1 # what is still in the ring is decoded before Ctrl-C
    kill -INT "$kpid"
    wait "$tpid" || true
    kpid=
  fi
  kill "$rpid" 2>/dev/null || true
  wait "$rpid" 2>/dev/null || true
  rpid=

  local cwall cu cs crss cevents
  read -r cwall cu cs crss <"$OUT/live-ctime.txt"
  cevents=$(awk '{print $3}' "$OUT/live-client.out" | tr -d '(')
  local kwall=- kcpu=- kstream=- krss=- kevents=- drops=-
  if [ "${#kw[@]}" -gt 0 ]; then
    local ku ks
    read -r kwall ku ks krss < <(tail -1 "$OUT/live-ktime.txt")
    kcpu=$(awk -v u="$ku" -v s="$ks" 'BEGIN {printf "%.2f", u + s}')
    kstream=$(awk -v a="$k0" -v b="$k1" -v hz="$HZ" 'BEGIN {printf "%.2f", (b - a) / hz}')
    if [ "${kout%.json}" != "$kout" ]; then
      kevents=$(grep '"record":"summary"' "$kout" | sed -nE 's/.*"events":\{[^}]*"MODIFIED":([0-9]+).*/\1/p' || true)
      drops=$(grep '"problem":"packets dropped by the kernel"' "$kout" | sed -nE 's/.*"detail":"([0-9]+) packets.*/\1/p' || true)
    else
      kevents=$(sed -nE 's/^summary: .* ([0-9]+) MODIFIED .*/\1/p' "$kout")
      drops=$(grep 'packets dropped by the kernel' "$kout" | grep -oE '[0-9]+ packets came' | cut -d' ' -f1 || true)
    fi
    kevents=${kevents:-0}
    drops=${drops:-0}
    # The output of a run that decoded every event is removed (25 MB);
    # that of one that did not is kept, to be looked at.
    if [ "$kevents" = "$cevents" ] && [ "$drops" = 0 ]; then
      rm -f "$kout" "$OUT/live-$cfg-$run.err"
    else
      echo "$cfg run $run: kwatch decoded $kevents of $cevents events, $drops packets dropped: see $kout and $OUT/live-$cfg-$run.err" >&2
    fi
  fi
  local opens
  opens=$(awk -v a="$o0" -v b="$o1" -v s="$cwall" 'BEGIN {printf "%.0f", (b - a) / s}')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$run" "$load1" "$cwall" \
    "$(awk -v u="$cu" -v s="$cs" 'BEGIN {printf "%.2f", u + s}')" "$crss" "$cevents" \
    "$kwall" "$kcpu" "$kstream" "$krss" "$anon" "$kevents" "$drops" "$opens" "$churn" >>"$OUT/live.tsv"
  echo "$cfg run $run: load $load1, $opens TCP opens/s (churn $churn/s), client ${cwall}s ${cevents} events; kwatch cpu ${kcpu}s (${kstream}s while streaming), rss ${krss} kB, ${kevents} events, ${drops} dropped" >&2
}

# run_kubectl CONFIG RUN: ten `kubectl create configmap` under kwatch attach
# --exe KUBECTL --all-http -o json (kubectl-create-proc: with
# KWATCH_ATTACH_OWNERS=proc); appends a line to live-kubectl.tsv: config run
# load1 kubectl_ms_median kubectl_ms_max posts decrypted kwatch_cpu_s (POSTs
# shown with their 201, and of their connections those decrypted with the
# keys of the kubectl that made them).
run_kubectl() {
  local cfg=$1 run=$2 load1 ns=bench-live-$$-$1-$2 kout=$OUT/live-$1-$2.json kerr=$OUT/live-$1-$2.err kenv=()
  [ "$cfg" = kubectl-create-proc ] && kenv=(KWATCH_ATTACH_OWNERS=proc)
  load1=$(cut -d' ' -f1 /proc/loadavg)
  "$KUBECTL" create namespace "$ns" >/dev/null
  : >"$kerr"
  env "${kenv[@]}" "$KWATCH" attach --exe "$KUBECTL" --all-http -o json >"$kout" 2>"$kerr" & kpid=$!
  for _ in $(seq 600); do grep -q "attached to every process of" "$kerr" && break; sleep 0.05; done
  local k0 k1 ms=()
  k0=$(cputicks "$kpid")
  for i in $(seq 10); do
    local t0 t1
    t0=$(date +%s%N)
    "$KUBECTL" create configmap "bench-$i" -n "$ns" --from-literal=i="$i" >/dev/null
    t1=$(date +%s%N)
    ms+=("$(((t1 - t0) / 1000000))")
  done
  sleep 1 # the last connection's close, then Ctrl-C
  k1=$(cputicks "$kpid")
  kill -INT "$kpid"
  wait "$kpid" || true
  kpid=
  "$KUBECTL" delete namespace "$ns" --wait=false >/dev/null
  local posts decrypted median max
  # A POST to the namespace's configmaps answered 201, on a connection whose
  # keys came from a kubectl's uprobe.
  read -r posts decrypted < <(python3 - "$kout" "$ns" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ns = sys.argv[2]
posts = {r["connection"]: r["exchange"] for r in recs if r.get("record") == "request" and r.get("method") == "POST" and "/namespaces/%s/configmaps" % ns in r.get("target", "")}
ok = {r["connection"] for r in recs if r.get("record") == "response" and r.get("statusCode") == 201 and posts.get(r["connection"]) == r.get("exchange")}
dec = {r["connection"] for r in recs if r.get("kind") == "tls-decrypted" and "the uprobe on kubectl (pid" in r.get("message", "")}
print(len(ok), len(ok & dec))
PY
  )
  median=$(printf '%s\n' "${ms[@]}" | median)
  max=$(printf '%s\n' "${ms[@]}" | sort -n | tail -1)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$run" "$load1" "$median" "$max" "$posts" "$decrypted" \
    "$(awk -v a="$k0" -v b="$k1" -v hz="$HZ" 'BEGIN {printf "%.2f", (b - a) / hz}')" >>"$OUT/live-kubectl.tsv"
  echo "$cfg run $run: load $load1, kubectl ${median} ms (max $max), $posts of 10 POSTs shown, $decrypted decrypted" >&2
  if [ "$posts" = 10 ] && [ "$decrypted" = 10 ]; then rm -f "$kout" "$kerr"; fi
}

# run_apiserver CONFIG RUN: kwatch attach kube-apiserver -o json for
# APISERVER_SECONDS while a ConfigMap is created and deleted every second;
# appends a line to live-apiserver.tsv: config run load1 seconds
# rss_steady_kb (the median of the second half's samples) rss_peak_kb
# (VmHWM) anon_end_kb connections events kwatch_cpu_s.
run_apiserver() {
  local cfg=$1 run=$2 load1 ns=bench-live-$$-$1-$2 kout=$OUT/live-$1-$2.json kerr=$OUT/live-$1-$2.err samples=()
  load1=$(cut -d' ' -f1 /proc/loadavg)
  "$KUBECTL" create namespace "$ns" >/dev/null
  : >"$kerr"
  "$KWATCH" attach kube-apiserver -o json >"$kout" 2>"$kerr" & kpid=$!
  for _ in $(seq 600); do grep -q "attached to kube-apiserver" "$kerr" && break; sleep 0.05; done
  local k0 k1 i
  k0=$(cputicks "$kpid")
  for i in $(seq "$APISERVER_SECONDS"); do
    "$KUBECTL" create configmap "bench-$i" -n "$ns" >/dev/null 2>&1 &&
      "$KUBECTL" delete configmap "bench-$i" -n "$ns" >/dev/null 2>&1 || true
    sleep 1
    samples+=("$(statuskb "$kpid" VmRSS)")
  done
  k1=$(cputicks "$kpid")
  local peak anon steady
  peak=$(statuskb "$kpid" VmHWM)
  anon=$(statuskb "$kpid" RssAnon)
  steady=$(printf '%s\n' "${samples[@]:$((${#samples[@]} / 2))}" | median)
  kill -INT "$kpid"
  wait "$kpid" || true
  kpid=
  "$KUBECTL" delete namespace "$ns" --wait=false >/dev/null
  local conns events
  conns=$(grep -c '"record":"connection"' "$kout" || true)
  events=$(grep -c '"record":"event"' "$kout" || true)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$run" "$load1" "$APISERVER_SECONDS" "$steady" "$peak" "$anon" "$conns" "$events" \
    "$(awk -v a="$k0" -v b="$k1" -v hz="$HZ" 'BEGIN {printf "%.2f", (b - a) / hz}')" >>"$OUT/live-apiserver.tsv"
  echo "$cfg run $run: load $load1, RSS steady $steady kB, peak $peak kB, anon at the end $anon kB; $conns connections, $events events" >&2
  rm -f "$kout" "$kerr"
}

: >"$OUT/live.tsv"
: >"$OUT/live-kubectl.tsv"
: >"$OUT/live-apiserver.tsv"
for run in $(seq "$RUNS"); do
  for cfg in "${CONFIGS[@]}"; do
    case $cfg in
      *-pretty) ;;
      kubectl-create*) run_kubectl "$cfg" "$run" ;;
      attach-apiserver) run_apiserver "$cfg" "$run" ;;
      *) run_one "$cfg" "$run" ;;
    esac
  done
done
for run in $(seq "$PRETTY_RUNS"); do
  for cfg in "${CONFIGS[@]}"; do
    if [ "${cfg%-pretty}" != "$cfg" ]; then run_one "$cfg" "$run"; fi
  done
done

fi

# The table: medians over the complete runs of each configuration (those
# where kwatch decoded every event the client counted, with no packet
# dropped; all of them without kwatch), peak RSS the largest; then the
# incomplete runs' events and drops, and every run's TCP opens/s (its
# range). "% of one core" is kwatch's CPU while the events flowed over the
# time they took. Every run follows, in the order they ran.
# col CONFIG N: field N of CONFIG's complete runs; allcol: of all its runs.
col() { awk -v c="$1" -v n="$2" -F'\t' '$1 == c && ($13 == "-" || ($13 == $7 && $14 == 0)) {print $n}' "$OUT/live.tsv"; }
allcol() { awk -v c="$1" -v n="$2" -F'\t' '$1 == c {print $n}' "$OUT/live.tsv"; }
loads=$( (cut -f3 "$OUT/live.tsv"; cut -f3 "$OUT/live-kubectl.tsv" 2>/dev/null) | sort -n | sed -n '1p;$p' | paste -sd- -)
echo
echo "$EVENTS MODIFIED events at $RATE/s, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), $(go version | cut -d' ' -f3); load average (1 min) $loads at the runs' starts; $RUNS runs of each configuration (pretty: $PRETTY_RUNS), medians of the complete ones."
echo
echo "| configuration | complete runs | stream s | client CPU s (% of a core) | kwatch CPU s, whole run | kwatch CPU s while streaming | % of one core | kwatch peak RSS | kwatch RssAnon at the end | incomplete runs: events / dropped | TCP opens/s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for cfg in plain pcap pcap-pretty tls-h2 attach-h2 attach-proc attach-busy attach-busy-proc attach-pretty tls-h1 attach-h1; do
  all=$(allcol "$cfg" 1 | grep -c . || true)
  [ "$all" -gt 0 ] || continue
  n=$(col "$cfg" 1 | grep -c . || true)
  opens=$(allcol "$cfg" 15 | sort -n | sed -n '1p;$p' | uniq | paste -sd- -)
  churns=$(allcol "$cfg" 16 | { grep -v '^-$' || true; } | sort -n | sed -n '1p;$p' | uniq | paste -sd- -)
  [ -n "$churns" ] && opens="$opens (churn $churns)"
  bad=$(awk -v c="$cfg" -F'\t' '$1 == c && $13 != "-" && ($13 != $7 || $14 != 0) {printf "%s%s / %s", sep, $13, $14; sep = ", "}' "$OUT/live.tsv")
  if [ "$n" = 0 ]; then
    printf '| %s | 0 of %s | - | - | - | - | - | - | - | %s | %s |\n' "$cfg" "$all" "${bad:--}" "$opens"
    continue
  fi
  wall=$(col "$cfg" 4 | median)
  ccpu=$(col "$cfg" 5 | median)
  cpct=$(paste <(col "$cfg" 5) <(col "$cfg" 4) | awk '{printf "%.1f\n", 100 * $1 / $2}' | median)
  if [ "$(col "$cfg" 9 | head -1)" = - ]; then
    printf '| %s | %s of %s | %.2f | %.2f (%.1f %%) | - | - | - | - | - | - | %s |\n' "$cfg" "$n" "$all" "$wall" "$ccpu" "$cpct" "$opens"
    continue
  fi
  kcpu=$(col "$cfg" 9 | median)
  kstream=$(col "$cfg" 10 | median)
  pct=$(paste <(col "$cfg" 10) <(col "$cfg" 4) | awk '{printf "%.1f\n", 100 * $1 / $2}' | median)
  krss=$(col "$cfg" 11 | sort -n | tail -1)
  anon=$(col "$cfg" 12 | sort -n | tail -1)
  printf '| %s | %s of %s | %.2f | %.2f (%.1f %%) | %.2f | %.2f | %.1f %% | %.0f MiB | %.0f MiB | %s | %s |\n' \
    "$cfg" "$n" "$all" "$wall" "$ccpu" "$cpct" "$kcpu" "$kstream" "$pct" "$(awk -v k="$krss" 'BEGIN {print k / 1024}')" \
    "$(awk -v k="$anon" 'BEGIN {print k / 1024}')" "${bad:--}" "$opens"
done
echo
echo "Every run, in the order they ran:"
echo
echo "| configuration | run | load (1 min) | TCP opens/s (churn's) | client CPU s | kwatch CPU s while streaming | % of one core | events client / kwatch | dropped |"
echo "|---|---|---|---|---|---|---|---|---|"
awk -F'\t' '{
  pct = ($10 == "-") ? "-" : sprintf("%.1f %%", 100 * $10 / $4)
  churn = ($16 == "" || $16 == "-") ? "" : sprintf(" (%s)", $16)
  printf "| %s | %s | %s | %s%s | %s | %s | %s | %s / %s | %s |\n", $1, $2, $3, $15, churn, $5, $10, pct, $7, $13, $14
}' "$OUT/live.tsv"
if [ -s "$OUT/live-kubectl.tsv" ]; then
  echo
  echo "Ten \`kubectl create configmap\` under \`kwatch attach --exe KUBECTL --all-http -o json\`, each run:"
  echo
  echo "| configuration | run | load (1 min) | kubectl ms, median (max) | POSTs shown (201) | of them decrypted | kwatch CPU s |"
  echo "|---|---|---|---|---|---|---|"
  awk -F'\t' '{printf "| %s | %s | %s | %s (%s) | %s of 10 | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8}' "$OUT/live-kubectl.tsv"
fi
if [ -s "$OUT/live-apiserver.tsv" ]; then
  echo
  echo "kwatch attach kube-apiserver -o json on the stack, each run:"
  echo
  echo "| run | load (1 min) | seconds | RSS steady (MiB) | RSS peak (MiB) | RssAnon at the end (MiB) | connections | events | kwatch CPU s |"
  echo "|---|---|---|---|---|---|---|---|---|"
  awk -F'\t' '{printf "| %s | %s | %s | %.0f | %.0f | %.0f | %s | %s | %s |\n", $2, $3, $4, $5 / 1024, $6 / 1024, $7 / 1024, $8, $9, $10}' "$OUT/live-apiserver.tsv"
fi
