#!/usr/bin/env bash
# Record one scenario's watch traffic through kubectl proxy:
#   hack/record.sh SCENARIO [NAME]      (make record SCENARIO=…)
# SCENARIO is one of: watch bookmarks proto cbor watchlist-gzip table big burst
# (or "all").
# NAME (default: SCENARIO) names the output files in testdata/captures/
# (or $KWATCH_CAPTURE_DIR):
#   NAME-any.pcap     tcpdump -i any (LINUX_SLL2 link type)
#   NAME-lo.pcap      tcpdump -i lo (Ethernet link type), the same packets
#   NAME.events.json  the events as the API server reported them: the captured
#                     curl's own body decoded with client-go, cross-checked
#                     against a direct client-go watch (see
#                     internal/e2e/cmd/kwatch-record).
#   NAME-stream.pcap  (scenario watch only) the same changes as seen by
#                     "kwatch stream --record" watching straight from the API
#                     server (TLS, not through the proxy tcpdump listens on):
#                     the round trip of a recorded live session.
# Existing files are never overwritten (golden tests may depend on them)
# unless KWATCH_RECORD_OVERWRITE=1.
#
# Needs the stack of hack/cluster-up.sh to be up, and root for tcpdump.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "$0")/lib.sh"

SCENARIOS=(watch bookmarks proto cbor watchlist-gzip table big burst)
usage() { local IFS="|"; echo "usage: $0 {${SCENARIOS[*]}|all} [NAME]  (make record SCENARIO=watch [NAME=my-watch])" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 2 ] || usage
if [ "$1" = all ]; then
  [ $# -eq 1 ] || usage
  for s in "${SCENARIOS[@]}"; do "$0" "$s"; done
  exit 0
fi
SCENARIO="$1"
NAME="${2:-$SCENARIO}"
[[ " ${SCENARIOS[*]} " == *" $SCENARIO "* ]] || usage
[[ "$NAME" =~ ^[A-Za-z0-9._-]+$ ]] || kw_die "NAME must be a plain file name prefix, got '$NAME'"

kw_stack_healthy || kw_die "the control plane is not up: run make cluster-up (hack/cluster-up.sh) first"
# shellcheck disable=SC1091
source "$KW_RUN_DIR/env"

OUT_DIR="${KWATCH_CAPTURE_DIR:-$KW_REPO_ROOT/testdata/captures}"
mkdir -p "$OUT_DIR"
OUTPUTS=("$OUT_DIR/$NAME-any.pcap" "$OUT_DIR/$NAME-lo.pcap" "$OUT_DIR/$NAME.events.json")
STREAM=0
if [ "$SCENARIO" = watch ]; then
  STREAM=1
  OUTPUTS+=("$OUT_DIR/$NAME-stream.pcap")
fi
if [ "${KWATCH_RECORD_OVERWRITE:-0}" != 1 ]; then
  for f in "${OUTPUTS[@]}"; do
    [ ! -e "$f" ] || kw_die "$f exists; name the new recording (make record SCENARIO=$SCENARIO NAME=my-$SCENARIO), or set KWATCH_RECORD_OVERWRITE=1 to replace it"
  done
fi

if ! command -v tcpdump >/dev/null; then
  kw_log "tcpdump is missing; installing it from Debian"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tcpdump >&2
fi
TCPDUMP="$(command -v tcpdump)"
# Write to new files (tcpdump would keep the mode of a file it truncates).
rm -f "${OUTPUTS[@]}"
WORK="$(mktemp -d)"

# The scenario driver is part of the main module (it uses client-go).
kw_log "building kwatch-record"
(cd "$KW_REPO_ROOT" && go build -o "$WORK/kwatch-record" ./internal/e2e/cmd/kwatch-record)
if [ "$STREAM" = 1 ]; then
  kw_log "building kwatch"
  (cd "$KW_REPO_ROOT" && go build -o "$WORK/kwatch" .)
fi

declare -A TCPDUMP_PID=()
RECORDED=0
STREAM_PID=
cleanup() {
  local ifc
  if [ -n "$STREAM_PID" ]; then kill -INT "$STREAM_PID" 2>/dev/null || true; fi
  for ifc in "${!TCPDUMP_PID[@]}"; do
    kill -INT "${TCPDUMP_PID[$ifc]}" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$WORK"
  # A failed recording leaves nothing that could pass for a good one.
  if [ "$RECORDED" != 1 ]; then
    rm -f "${OUTPUTS[@]}"
  fi
}
trap cleanup EXIT

# Both interfaces hold the same packets with different link types (SLL2 on
# "any", Ethernet on "lo"); kwatch must read both.
#   -U --immediate-mode: write each packet at once; without it the last
#       ~1 s (the last-chunk and the FINs) was lost on SIGINT.
#   -B 65536 (KiB): a 200 KB event dropped packets with the default buffer.
#   -s 0: whole packets. -Z root: keep writing where root can (Debian's
#       tcpdump otherwise drops to user tcpdump before opening the file).
for ifc in any lo; do
  "$TCPDUMP" -i "$ifc" -nn -U --immediate-mode -B 65536 -s 0 -Z root \
    -w "$OUT_DIR/$NAME-$ifc.pcap" "tcp port $KW_PROXY_PORT" \
    </dev/null >"$WORK/tcpdump-$ifc.log" 2>&1 &
  TCPDUMP_PID[$ifc]=$!
done
# tcpdump prints "listening on …" once the capture is open; do not start the
# scenario before that or its first packets are missing.
# wait_for PATTERN FILE PID SECONDS WHAT LOG: wait until FILE holds PATTERN;
# if process PID ends or SECONDS pass first, show LOG and die saying WHAT.
wait_for() {
  local pattern=$1 file=$2 pid=$3 secs=$4 what=$5 log=$6
  local deadline=$(($(date +%s) + secs))
  until grep -qs "$pattern" "$file"; do
    if ! kill -0 "$pid" 2>/dev/null || [ "$(date +%s)" -ge "$deadline" ]; then
      cat "$log" >&2
      kw_die "$what within ${secs}s"
    fi
    sleep 0.1
  done
}
for ifc in any lo; do
  wait_for 'listening on' "$WORK/tcpdump-$ifc.log" "${TCPDUMP_PID[$ifc]}" 10 \
    "tcpdump -i $ifc did not start capturing" "$WORK/tcpdump-$ifc.log"
done

if [ "$STREAM" = 1 ]; then
  # kwatch stream watches the scenario's namespace before the scenario
  # starts; its first "watch" record says the watch is open.
  "$WORK/kwatch" stream configmaps -n "kwatch-$SCENARIO" --kubeconfig "$KUBECONFIG" \
    --record "$OUT_DIR/$NAME-stream.pcap" -o json >"$WORK/stream.jsonl" 2>"$WORK/stream.err" &
  STREAM_PID=$!
  wait_for '"record":"watch"' "$WORK/stream.jsonl" "$STREAM_PID" 20 \
    "kwatch stream did not open its watch" "$WORK/stream.err"
fi

kw_log "recording scenario $SCENARIO"
"$WORK/kwatch-record" -kubeconfig "$KUBECONFIG" -proxy-url "$PROXY_URL" \
  -scenario "$SCENARIO" -out "$OUT_DIR/$NAME.events.json" ||
  kw_die "scenario $SCENARIO failed; the captures $OUT_DIR/$NAME-*.pcap are incomplete"

# Immediate mode has written everything already; the pause only lets the
# last FIN/ACK of the closed connection arrive.
sleep 0.5
if [ "$STREAM" = 1 ]; then
  kill -INT "$STREAM_PID"
  wait "$STREAM_PID" || true
  STREAM_PID=
  n=$(grep -c '"record":"event"' "$WORK/stream.jsonl" || true)
  kw_log "$NAME-stream.pcap: kwatch stream saw $n events"
fi
for ifc in any lo; do
  kill -INT "${TCPDUMP_PID[$ifc]}"
  wait "${TCPDUMP_PID[$ifc]}" || true
  unset "TCPDUMP_PID[$ifc]"
done

rc=0
for ifc in any lo; do
  log="$WORK/tcpdump-$ifc.log"
  captured=$(awk '/packets captured/ {print $1}' "$log")
  dropped=$(awk '/packets dropped by kernel/ {print $1}' "$log")
  kw_log "$NAME-$ifc.pcap: ${captured:-?} packets captured, ${dropped:-?} dropped by the kernel"
  if [ "${dropped:-1}" != 0 ] || [ "${captured:-0}" = 0 ]; then
    cat "$log" >&2
    kw_log "ERROR: the $ifc capture is incomplete (nothing kept); record again"
    rc=1
  fi
done
if [ "$rc" -eq 0 ]; then
  RECORDED=1
  ls -l "${OUTPUTS[@]}" >&2
fi
exit "$rc"
