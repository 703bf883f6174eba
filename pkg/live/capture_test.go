package live

import (
	"bytes"
	"io"
	"net"
	"os"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// needRoot skips where packet sockets cannot be opened: never as root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a packet socket needs CAP_NET_RAW: run as root")
	}
}

// TestLoopbackOnce sends 300 000 bytes over a loopback connection and checks
// that the capture holds every byte of them, each segment once but for a
// few retransmissions (loopback's OUTGOING copies dropped), in segments of up to 64 KiB kept whole (GRO/TSO), and
// nothing of a second connection on another port.
func TestLoopbackOnce(t *testing.T) {
	needRoot(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	for _, iface := range []string{"lo", "any"} {
		t.Run(iface, func(t *testing.T) {
			c, err := Open(Options{Interface: iface, Filter: Filter{Ports: []uint16{port}}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			payload := bytes.Repeat([]byte("0123456789abcdef"), 300000/16)
			done := make(chan error, 1)
			go func() {
				s, err := ln.Accept()
				if err != nil {
					done <- err
					return
				}
				_, err = s.Write(payload)
				s.Close()
				done <- err
			}()
			// Traffic on the other port must not come through.
			go func() {
				if s, err := other.Accept(); err == nil {
					s.Write([]byte("not for us"))
					s.Close()
				}
			}()
			if o, err := net.Dial("tcp", other.Addr().String()); err == nil {
				io.Copy(io.Discard, o)
				o.Close()
			}
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(conn)
			conn.Close()
			if err != nil || <-done != nil || len(got) != len(payload) {
				t.Fatalf("transfer: %d bytes, %v", len(got), err)
			}
			// Bytes by sequence number: a segment seen twice is a TCP
			// retransmission (a loaded machine) or an OUTGOING copy that
			// the filter should have dropped (every segment twice).
			seen := map[uint32]int{}
			var fromServer, dups, segments, fins, biggest, truncated int
			for fins < 2 {
				data, ci, link, err := c.ReadPacket()
				if err != nil {
					t.Fatal(err)
				}
				if data == nil {
					t.Fatalf("idle before both FINs: %d bytes from the server", fromServer)
				}
				if link != layers.LinkTypeRaw {
					t.Fatalf("link type %v", link)
				}
				if ci.CaptureLength < ci.Length {
					truncated++
				}
				p := gopacket.NewPacket(data, layers.LayerTypeIPv4, gopacket.Default)
				tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
				if tcp == nil {
					t.Fatalf("not TCP: %v", p)
				}
				if uint16(tcp.SrcPort) != port && uint16(tcp.DstPort) != port {
					t.Fatalf("a segment of ports %d→%d came through the filter of port %d", tcp.SrcPort, tcp.DstPort, port)
				}
				if uint16(tcp.SrcPort) == port && len(tcp.Payload) > 0 {
					segments++
					if _, ok := seen[tcp.Seq]; ok {
						dups++
					} else {
						seen[tcp.Seq] = len(tcp.Payload)
						fromServer += len(tcp.Payload)
					}
					biggest = max(biggest, len(tcp.Payload))
				}
				if tcp.FIN {
					fins++
				}
			}
			if fromServer != len(payload) {
				t.Errorf("captured %d payload bytes from the server, sent %d", fromServer, len(payload))
			}
			if dups*4 > segments {
				t.Errorf("%d of %d segments seen twice: loopback's OUTGOING copies came through", dups, segments)
			}
			if truncated > 0 {
				t.Errorf("%d packets cut short", truncated)
			}
			t.Logf("largest segment %d bytes", biggest)
			if _, dropped, err := c.Stats(); err != nil || dropped != 0 {
				t.Errorf("stats: %d dropped, %v", dropped, err)
			}
		})
	}
}
