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
#   CONFIGS="..."   the configurations to run (default: all, listed below)
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
#   pcap-pretty, attach-pretty: pcap and attach-h2 with the pretty output
# Port 8443 is one that kwatch attach captures from the start
# (attach.DefaultPorts); another port would be learned from the client's SYN.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
EVENTS="${EVENTS:-100000}"
RATE="${RATE:-10000}"
PRETTY_RUNS="${PRETTY_RUNS:-1}"
read -r -a CONFIGS <<<"${CONFIGS:-plain pcap tls-h2 attach-h2 tls-h1 attach-h1 pcap-pretty attach-pretty}"
OUT=bench/out
mkdir -p "$OUT"
if [ "$(id -u)" != 0 ]; then
  echo "bench/live.sh needs root: kwatch pcap -i opens a packet socket, kwatch attach a uprobe" >&2
  exit 2
fi
[ -x /usr/bin/time ] || { echo "installing time from Debian" >&2; apt-get update -qq && apt-get install -y -qq time >/dev/null; }

if [ "${TABLE_ONLY:-}" != 1 ]; then
echo "building" >&2
if [ -z "${KWATCH:-}" ]; then
  go build -trimpath -o "$OUT/kwatch" .
  KWATCH=$OUT/kwatch
fi
go build -o "$OUT/replay" ./bench/replay
go build -o "$OUT/client" ./bench/client
CLIENT=$(realpath "$OUT/client")
PLAIN=127.0.0.1:18080
TLSADDR=127.0.0.1:8443
WATCH="/api/v1/namespaces/default/configmaps?watch=1"

rpid=
kpid=
cleanup() {
  if [ -n "$kpid" ]; then kill "$kpid" 2>/dev/null || true; fi
  if [ -n "$rpid" ]; then kill "$rpid" 2>/dev/null || true; fi
}
trap cleanup EXIT

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
    attach-h2 | attach-h1) kw=(attach --exe "$CLIENT" -o json) ;;
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
    /usr/bin/time -f "%e %U %S %M" -o "$OUT/live-ktime.txt" "$KWATCH" "${kw[@]}" >"$kout" 2>"$OUT/live-$cfg-$run.err" & tpid=$!
    # kwatch's pid, then its capture (or uprobe) in place: for pcap -i, the
    # ring mapped (the socket is listed by ss -0 before its ring is set up,
    # and packets that come meanwhile are not captured); for attach, the
    # line it writes once its uprobe and its capture are in place.
    kpid=
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

  local k0=0 k1=0 anon=0
  [ -n "$kpid" ] && k0=$(cputicks "$kpid")
  local o0 o1
  o0=$(tcpopens)
  /usr/bin/time -f "%e %U %S %M" -o "$OUT/live-ctime.txt" "$CLIENT" "${copt[@]}" -url "$url" >"$OUT/live-client.out"
  o1=$(tcpopens)
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
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$run" "$load1" "$cwall" \
    "$(awk -v u="$cu" -v s="$cs" 'BEGIN {printf "%.2f", u + s}')" "$crss" "$cevents" \
    "$kwall" "$kcpu" "$kstream" "$krss" "$anon" "$kevents" "$drops" "$opens" >>"$OUT/live.tsv"
  echo "$cfg run $run: load $load1, $opens TCP opens/s, client ${cwall}s ${cevents} events; kwatch cpu ${kcpu}s (${kstream}s while streaming), rss ${krss} kB, ${kevents} events, ${drops} dropped" >&2
}

: >"$OUT/live.tsv"
for run in $(seq "$RUNS"); do
  for cfg in "${CONFIGS[@]}"; do
    if [ "${cfg%-pretty}" = "$cfg" ]; then run_one "$cfg" "$run"; fi
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
median() { sort -n | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else printf "%.2f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# col CONFIG N: field N of CONFIG's complete runs; allcol: of all its runs.
col() { awk -v c="$1" -v n="$2" -F'\t' '$1 == c && ($13 == "-" || ($13 == $7 && $14 == 0)) {print $n}' "$OUT/live.tsv"; }
allcol() { awk -v c="$1" -v n="$2" -F'\t' '$1 == c {print $n}' "$OUT/live.tsv"; }
loads=$(cut -f3 "$OUT/live.tsv" | sort -n | sed -n '1p;$p' | paste -sd- -)
echo
echo "$EVENTS MODIFIED events at $RATE/s, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), $(go version | cut -d' ' -f3); load average (1 min) $loads at the runs' starts; $RUNS runs of each configuration (pretty: $PRETTY_RUNS), medians of the complete ones."
echo
echo "| configuration | complete runs | stream s | client CPU s (% of a core) | kwatch CPU s, whole run | kwatch CPU s while streaming | % of one core | kwatch peak RSS | kwatch RssAnon at the end | incomplete runs: events / dropped | TCP opens/s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for cfg in plain pcap pcap-pretty tls-h2 attach-h2 attach-pretty tls-h1 attach-h1; do
  all=$(allcol "$cfg" 1 | grep -c . || true)
  [ "$all" -gt 0 ] || continue
  n=$(col "$cfg" 1 | grep -c . || true)
  opens=$(allcol "$cfg" 15 | sort -n | sed -n '1p;$p' | uniq | paste -sd- -)
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
echo "| configuration | run | load (1 min) | TCP opens/s | client CPU s | kwatch CPU s while streaming | % of one core | events client / kwatch | dropped |"
echo "|---|---|---|---|---|---|---|---|---|"
awk -F'\t' '{
  pct = ($10 == "-") ? "-" : sprintf("%.1f %%", 100 * $10 / $4)
  printf "| %s | %s | %s | %s | %s | %s | %s | %s / %s | %s |\n", $1, $2, $3, $15, $5, $10, pct, $7, $13, $14
}' "$OUT/live.tsv"
