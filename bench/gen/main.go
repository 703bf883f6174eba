// Command gen writes a large, realistic Kubernetes watch capture for
// kwatch's benchmarks, deterministically (the same flags give the same
// bytes): many watch connections through kubectl proxy on port 8001,
// interleaved, carrying a mix of small events (about 1 KB, one chunk each),
// 200 KB events split into 32 KiB chunks, chunks that carry several events,
// and some out-of-order segments. Packets are Ethernet/IPv4/TCP with a
// 1448-byte MSS, as on a real network; the file is classic pcap with
// microsecond timestamps. Each watch ends with the last-chunk (-open: not).
//
// Usage: go run ./bench/gen -size 100MB -o bench/out/watch-100MB.pcap
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// mss is the largest payload of one segment, in bytes (-mss).
var mss = 1448

// open leaves every watch body without its last-chunk (-open). By default
// each ends with it, as when a watch's timeoutSeconds expires: TShark
// dissects an HTTP response only once its whole body is reassembled, so on
// open watches it lists no chunk at all.
var open bool

// gz sends every watch body gzip'd (-gzip), as the API server answers a Go
// client's watch-list: Content-Encoding: gzip, one gzip member per flush
// (here per chunk; a 200 KB event is one member split into 32 KiB chunks).
var gz bool

func main() {
	size := flag.String("size", "100MB", "capture size to reach (e.g. 10MB, 1GB)")
	out := flag.String("o", "", "output file")
	conns := flag.Int("conns", 16, "watch connections")
	flag.IntVar(&mss, "mss", mss, "largest TCP payload per packet, in bytes (65483 as on Linux loopback)")
	flag.BoolVar(&open, "open", false, "leave the watches open at the end (no last-chunk), as a capture stopped mid-watch")
	flag.BoolVar(&gz, "gzip", false, "gzip every watch body (Content-Encoding: gzip, a member per flush), as 1.37 answers a Go client's watch-list")
	flag.BoolVar(&useTLS, "tls", false, "with -http2: the connection is TLS 1.3 (ALPN h2, records made by crypto/tls), its key log written to FILE.keys.log")
	flag.BoolVar(&h2, "http2", false, "one HTTP/2 connection (prior knowledge) carrying the watches as streams, events in DATA frames of at most 16384 bytes, as client-go's connection to the API server")
	flag.Parse()
	target, err := parseSize(*size)
	if err != nil || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: gen -size 100MB -o FILE")
		os.Exit(2)
	}
	if useTLS && !h2 {
		fmt.Fprintln(os.Stderr, "gen: -tls goes with -http2 (client-go's TLS connection to the API server)")
		os.Exit(2)
	}
	run := run
	if h2 {
		run = runHTTP2
	}
	if err := run(*out, target, *conns); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// text returns n letters and digits from rng: data that compresses about
// as little as real object data.
func text(rng *rand.Rand, n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/"
	b := make([]byte, n)
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	return string(b)
}

// flush returns what the server writes for one flush of data: data
// itself, or one gzip member of it (-gzip).
func flush(data []byte) []byte {
	if !gz {
		return data
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write(data)
	_ = zw.Close()
	return b.Bytes()
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "GB"):
		mult, s = 1<<30, strings.TrimSuffix(s, "GB")
	case strings.HasSuffix(s, "MB"):
		mult, s = 1<<20, strings.TrimSuffix(s, "MB")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}

// conn is one watch connection being written.
type conn struct {
	client, server net.IP
	cport          uint16
	cseq, sseq     uint32
	rv             int
	events         int
}

type writer struct {
	w       *pcapgo.Writer
	f       *bufio.Writer
	written int64
	now     time.Time
	rng     *rand.Rand
	buf     gopacket.SerializeBuffer
	held    []byte // a segment held back to be written after the next one
}

// newWriter writes a pcap header (Ethernet) to f and returns the writer of
// the capture's packets, its clock at 2026-01-01 00:00 UTC.
func newWriter(f *os.File) (*writer, error) {
	bw := bufio.NewWriterSize(f, 1<<20)
	pw := pcapgo.NewWriter(bw)
	if err := pw.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return nil, err
	}
	return &writer{w: pw, f: bw, written: 24, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		rng: rand.New(rand.NewPCG(1, 2)), buf: gopacket.NewSerializeBuffer()}, nil
}

// flushHeld writes the segment held back to come out of order, if any.
func (w *writer) flushHeld() error {
	if w.held == nil {
		return nil
	}
	err := w.write(w.held)
	w.held = nil
	return err
}

func run(path string, target int64, nconns int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w, err := newWriter(f)
	if err != nil {
		return err
	}
	cs := make([]*conn, nconns)
	for i := range cs {
		cs[i] = &conn{client: net.IPv4(10, 0, 0, 1), server: net.IPv4(10, 0, 0, 2), cport: uint16(40000 + i),
			cseq: 1000 + uint32(i)*7919, sseq: 5000 + uint32(i)*104729, rv: 1000 * (i + 1)}
		req := fmt.Sprintf("GET /api/v1/namespaces/ns-%d/configmaps?watch=1&allowWatchBookmarks=true HTTP/1.1\r\nHost: 127.0.0.1:8001\r\nUser-Agent: kubectl/v1.37.2\r\nAccept: application/json\r\n\r\n", i)
		if err := w.send(cs[i], true, []byte(req)); err != nil {
			return err
		}
		enc := ""
		if gz {
			enc = "Content-Encoding: gzip\r\nVary: Accept-Encoding\r\n"
		}
		resp := "HTTP/1.1 200 OK\r\nCache-Control: no-cache, private\r\nContent-Type: application/json\r\n" + enc + "Date: Thu, 01 Jan 2026 00:00:00 GMT\r\nTransfer-Encoding: chunked\r\n\r\n"
		if err := w.send(cs[i], false, []byte(resp)); err != nil {
			return err
		}
	}
	small := strings.Repeat("x", 600)
	big := strings.Repeat("y", 200<<10)
	if gz {
		// Repeated letters would compress a hundredfold; real objects
		// shrink about 2:1 (a ConfigMap event: 747 -> 430 bytes).
		small, big = text(w.rng, 600), text(w.rng, 200<<10)
	}
	for n := 0; w.written < target; n++ {
		c := cs[n%nconns]
		var body []byte
		switch {
		case n%97 == 0: // a 200 KB object, split into 32 KiB chunks
			ev := flush(c.event("MODIFIED", big))
			for len(ev) > 0 {
				k := min(len(ev), 32768)
				body = appendChunk(body, ev[:k])
				ev = ev[k:]
			}
		case n%10 == 0: // three events in one chunk, as a proxy may coalesce them
			var data []byte
			for j := 0; j < 3; j++ {
				data = append(data, c.event("ADDED", small)...)
			}
			body = appendChunk(body, flush(data))
		default:
			body = appendChunk(body, flush(c.event("MODIFIED", small)))
		}
		if err := w.send(c, false, body); err != nil {
			return err
		}
	}
	if err := w.flushHeld(); err != nil {
		return err
	}
	if !open {
		for _, c := range cs {
			if err := w.send(c, false, []byte("0\r\n\r\n")); err != nil {
				return err
			}
		}
		if err := w.flushHeld(); err != nil {
			return err
		}
	}
	return w.f.Flush()
}

func appendChunk(b, data []byte) []byte {
	b = strconv.AppendInt(b, int64(len(data)), 16)
	b = append(b, '\r', '\n')
	b = append(b, data...)
	return append(b, '\r', '\n')
}

// event returns one watch event line like the API server writes.
func (c *conn) event(typ, payload string) []byte {
	c.rv++
	c.events++
	return []byte(fmt.Sprintf(`{"type":%q,"object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-%d-%d","namespace":"ns-%d","uid":"00000000-0000-0000-0000-%012d","resourceVersion":"%d","creationTimestamp":"2026-01-01T00:00:00Z"},"data":{"k":%q}}}`+"\n",
		typ, c.cport, c.events%50, c.cport, c.events, c.rv, payload))
}

// send writes p from one side as MSS-sized segments. One segment in 200 is
// held back and written after the next one: out of order.
func (w *writer) send(c *conn, fromClient bool, p []byte) error {
	for len(p) > 0 {
		k := min(len(p), mss)
		seg, err := w.segment(c, fromClient, p[:k])
		if err != nil {
			return err
		}
		p = p[k:]
		if w.held == nil && w.rng.IntN(200) == 0 {
			w.held = seg
			continue
		}
		if err := w.write(seg); err != nil {
			return err
		}
		if w.held != nil {
			if err := w.write(w.held); err != nil {
				return err
			}
			w.held = nil
		}
	}
	return nil
}

func (w *writer) segment(c *conn, fromClient bool, payload []byte) ([]byte, error) {
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{0, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{0, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: c.client, DstIP: c.server}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(c.cport), DstPort: 8001, Seq: c.cseq, Ack: c.sseq, ACK: true, PSH: true, Window: 65535}
	if !fromClient {
		ip.SrcIP, ip.DstIP = c.server, c.client
		tcp.SrcPort, tcp.DstPort = 8001, layers.TCPPort(c.cport)
		tcp.Seq, tcp.Ack = c.sseq, c.cseq
		c.sseq += uint32(len(payload))
	} else {
		c.cseq += uint32(len(payload))
	}
	_ = tcp.SetNetworkLayerForChecksum(ip)
	if err := gopacket.SerializeLayers(w.buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, tcp, gopacket.Payload(payload)); err != nil {
		return nil, err
	}
	return append([]byte(nil), w.buf.Bytes()...), nil
}

func (w *writer) write(pkt []byte) error {
	w.now = w.now.Add(50 * time.Microsecond)
	ci := gopacket.CaptureInfo{Timestamp: w.now, CaptureLength: len(pkt), Length: len(pkt)}
	w.written += 16 + int64(len(pkt))
	return w.w.WritePacket(ci, pkt)
}
