#!/usr/bin/env bash
# kwatch's benchmarks (make bench): kwatch against TShark and against the
# physical floor (reading the packets with pcapgo and nothing else) on the
# same generated captures, and live decoding against kubectl on the same
# replayed watch. Results go to bench/RESULTS.md.
#
#   RUNS=3            runs of each command, alternated; medians are reported
#   BENCH_LARGE=1     also a 1 GB capture
#   TSHARK_MAX_MB=50  TShark only on captures up to this size (it grows faster
#                     than linearly: 44 s for 50 MB measured here)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
TSHARK_MAX_MB="${TSHARK_MAX_MB:-50}"
OUT=bench/out
mkdir -p "$OUT"

need=()
command -v tshark >/dev/null || need+=(tshark)
[ -x /usr/bin/time ] || need+=(time)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
fi

echo "building" >&2
go build -trimpath -o "$OUT/kwatch" .
go build -o "$OUT/floor" ./bench/floor
go build -o "$OUT/gen" ./bench/gen
go build -o "$OUT/replay" ./bench/replay

sizes=(10 20 50 100)
[ "${BENCH_LARGE:-}" = 1 ] && sizes+=(1024)
for mb in "${sizes[@]}"; do
  f="$OUT/watch-${mb}MB.pcap"
  [ -f "$f" ] || { echo "generating $f" >&2; "$OUT/gen" -size "${mb}MB" -o "$f"; }
done

# measure CMD...: prints "seconds maxrss_kb" of one run, output discarded.
# Wall time from bash's EPOCHREALTIME (microseconds; /usr/bin/time's %e has
# only 10 ms), peak RSS from /usr/bin/time.
measure() {
  local t0=$EPOCHREALTIME
  /usr/bin/time -f "%M" -o "$OUT/time.txt" "$@" >/dev/null 2>"$OUT/stderr.txt" || true
  local t1=$EPOCHREALTIME
  awk -v a="$t0" -v b="$t1" -v rss="$(tail -1 "$OUT/time.txt")" 'BEGIN {printf "%.4f %s\n", b - a, rss}'
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

results="$OUT/results.tsv"
: >"$results"
for mb in "${sizes[@]}"; do
  f="$OUT/watch-${mb}MB.pcap"
  bytes=$(stat -c %s "$f")
  events=$("$OUT/kwatch" pcap -o json "$f" | tail -1 | sed -E 's/.*"events":\{([^}]*)\}.*/\1/' | tr ',' '\n' | awk -F: '{s+=$2} END {print s}')
  : >"$OUT/k.txt"; : >"$OUT/kr.txt"; : >"$OUT/f.txt"; : >"$OUT/t.txt"
  for run in $(seq "$RUNS"); do
    echo "size ${mb} MB, run $run" >&2
    read -r s rss < <(measure "$OUT/kwatch" pcap -o json "$f"); echo "$s" >>"$OUT/k.txt"; echo "$rss" >>"$OUT/kr.txt"
    read -r s _ < <(measure "$OUT/floor" "$f"); echo "$s" >>"$OUT/f.txt"
    if [ "$mb" -le "$TSHARK_MAX_MB" ]; then
      read -r s _ < <(measure tshark -r "$f" -d tcp.port==8001,http -Y http.response -T fields -e http.chunk_size); echo "$s" >>"$OUT/t.txt"
    fi
  done
  k=$(median <"$OUT/k.txt"); kr=$(sort -n "$OUT/kr.txt" | tail -1); fl=$(median <"$OUT/f.txt")
  t=-; [ -s "$OUT/t.txt" ] && t=$(median <"$OUT/t.txt")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mb" "$bytes" "$events" "$k" "$kr" "$fl" "$t" >>"$results"
done

# Live: one replayed watch of 100k events (bench/replay also answers
# discovery and the LIST before it). The same work: kwatch stream and
# kubectl get -w, both -o json, each listing then watching configmaps; and
# the raw body, which kubectl get --raw only copies.
EVENTS=100000
kubectl_bin=$(command -v kubectl || true)
[ -x "${XDG_CACHE_HOME:-$HOME/.cache}/kwatch/run/bin/kubectl" ] && kubectl_bin="${XDG_CACHE_HOME:-$HOME/.cache}/kwatch/run/bin/kubectl"
RAW='/api/v1/namespaces/kube-system/configmaps?watch=1'
URL=http://127.0.0.1:18080
rpid=
trap '[ -n "$rpid" ] && kill $rpid 2>/dev/null || true' EXIT
# live NAME CMD...: one run of CMD against a fresh replay; appends
# "NAME seconds maxrss_kb" to live.tsv.
live() {
  local name=$1; shift
  "$OUT/replay" -addr 127.0.0.1:18080 -events $EVENTS & rpid=$!
  for _ in $(seq 50); do curl -fs "$URL/api" >/dev/null 2>&1 && break; sleep 0.1; done
  read -r s rss < <(measure "$@")
  kill $rpid 2>/dev/null || true; wait $rpid 2>/dev/null || true; rpid=
  printf '%s\t%s\t%s\n' "$name" "$s" "$rss" >>"$OUT/live.tsv"
}
: >"$OUT/live.tsv"
for run in $(seq "$RUNS"); do
  echo "live, run $run" >&2
  live kwatch-watch "$OUT/kwatch" stream configmaps -n kube-system --proxy "$URL" -o json
  live kwatch-raw "$OUT/kwatch" stream --raw "$RAW" --proxy "$URL" -o json
  if [ -n "$kubectl_bin" ]; then
    live kubectl-watch "$kubectl_bin" --server "$URL" get configmaps -n kube-system -w -o json
    live kubectl-raw "$kubectl_bin" --server "$URL" get --raw "$RAW"
  fi
done

# RESULTS.md
{
  echo "# kwatch benchmark results"
  echo
  echo "Written by \`make bench\` (bench/run.sh) on $(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"
  echo "$(go version | cut -d' ' -f3), $(tshark --version 2>/dev/null | head -1 || echo 'no tshark'). Medians of $RUNS runs, alternated."
  echo
  echo "Captures: \`bench/gen\` (16 watch connections through kubectl proxy, Ethernet, 1448-byte MSS;"
  echo "small events one per chunk, every 10th chunk carrying 3 events, every 97th event 200 KB in 32 KiB chunks, 1 segment in 200 out of order)."
  echo
  echo "Commands: \`kwatch pcap -o json FILE > /dev/null\`; \`bench/floor FILE\` (pcapgo reads every packet, nothing else);"
  echo "\`tshark -r FILE -d tcp.port==8001,http -Y http.response -T fields -e http.chunk_size\`. Peak RSS from \`/usr/bin/time\`."
  echo
  echo "| capture | events | kwatch s | kwatch MB/s | kwatch events/s | kwatch peak RSS | floor s | TShark s | kwatch/TShark speed | kwatch/floor speed |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  while IFS=$'\t' read -r mb bytes events k kr fl t; do
    awk -v mb="$mb" -v bytes="$bytes" -v ev="$events" -v k="$k" -v kr="$kr" -v fl="$fl" -v t="$t" 'BEGIN {
      mbs = bytes / 1048576 / (k > 0 ? k : 0.001)
      eps = ev / (k > 0 ? k : 0.001)
      ts = (t == "-") ? "-" : sprintf("%.1fx", t / (k > 0 ? k : 0.001))
      printf "| %d MB | %d | %.3f | %.0f | %.0f | %.1f MiB | %.4f | %s | %s | 1/%.0f |\n", mb, ev, k, mbs, eps, kr / 1024, fl, t, ts, k / (fl > 0 ? fl : 0.001)
    }'
  done <"$results"
  echo
  echo "Live: a local server (\`bench/replay\`) answers discovery and the LIST, then streams $EVENTS ConfigMap"
  echo "MODIFIED events of about 1 KB, one chunk each. Each command runs against a fresh replay; medians of $RUNS runs."
  echo "kubectl is $("${kubectl_bin:-false}" version --client 2>/dev/null | head -1 || echo 'not found')."
  echo
  echo "| command | s | events/s | peak RSS |"
  echo "|---|---|---|---|"
  for name in kwatch-watch kubectl-watch kwatch-raw kubectl-raw; do
    case $name in
      kwatch-watch) cmdline="\`kwatch stream configmaps -n kube-system --proxy URL -o json\`" ;;
      kubectl-watch) cmdline="\`kubectl --server URL get configmaps -n kube-system -w -o json\`" ;;
      kwatch-raw) cmdline="\`kwatch stream --raw PATH --proxy URL -o json\`" ;;
      kubectl-raw) cmdline="\`kubectl --server URL get --raw PATH\` (copies the body, decodes nothing)" ;;
    esac
    s=$(awk -v n="$name" '$1 == n {print $2}' "$OUT/live.tsv" | median)
    rss=$(awk -v n="$name" '$1 == n {print $3}' "$OUT/live.tsv" | sort -n | tail -1)
    [ -z "$s" ] && continue
    awk -v c="$cmdline" -v s="$s" -v rss="$rss" -v ev="$EVENTS" 'BEGIN {printf "| %s | %.2f | %.0f | %.1f MiB |\n", c, s, ev / s, rss / 1024}'
  done
  kw=$(awk '$1 == "kwatch-watch" {print $2}' "$OUT/live.tsv" | median)
  kc=$(awk '$1 == "kubectl-watch" {print $2}' "$OUT/live.tsv" | median)
  if [ -n "$kw" ] && [ -n "$kc" ]; then
    echo
    awk -v kw="$kw" -v kc="$kc" 'BEGIN {printf "kwatch stream / kubectl get -w, events/s: **%.1fx**\n", kc / kw}'
  fi
} >bench/RESULTS.md
echo "wrote bench/RESULTS.md" >&2
cat bench/RESULTS.md
