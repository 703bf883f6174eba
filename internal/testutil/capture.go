package testutil

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// ConnPieces returns the TCP payloads of the first connection in a pcap
// file (a capture on one interface, in order, such as make record's -lo
// captures) as pieces in packet order: the client is the side that sent
// the SYN. Retransmitted bytes are dropped; a capture with bytes missing
// fails the test, which is for cutting a whole connection's bytes at
// chosen offsets, not for reassembly.
func ConnPieces(t testing.TB, file string) []Piece {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var client, server layers.TCPPort
	next := map[layers.TCPPort]uint32{} // by sending port: the next sequence number
	var pieces []Piece
	for {
		b, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pk := gopacket.NewPacket(b, r.LinkType(), gopacket.Default)
		tcp, ok := pk.TransportLayer().(*layers.TCP)
		if !ok {
			continue
		}
		if client == 0 {
			if !tcp.SYN || tcp.ACK {
				continue
			}
			client, server = tcp.SrcPort, tcp.DstPort
		}
		if !(tcp.SrcPort == client && tcp.DstPort == server || tcp.SrcPort == server && tcp.DstPort == client) {
			continue
		}
		if tcp.SYN {
			next[tcp.SrcPort] = tcp.Seq + 1
			continue
		}
		p := tcp.Payload
		if len(p) == 0 {
			continue
		}
		want := next[tcp.SrcPort]
		switch d := int64(int32(tcp.Seq - want)); {
		case d > 0:
			t.Fatalf("%s: %d bytes missing before seq %d from port %d", file, d, tcp.Seq, tcp.SrcPort)
		case -d >= int64(len(p)):
			continue // retransmitted
		case d < 0:
			p = p[-d:]
		}
		next[tcp.SrcPort] = want + uint32(len(p))
		pieces = append(pieces, Piece{Client: tcp.SrcPort == client, P: append([]byte(nil), p...)})
	}
	if client == 0 {
		t.Fatalf("%s: no SYN", file)
	}
	return pieces
}

// CutPieces returns pieces from the client's byte cl and the server's
// byte sv on: what a capture that began there would hold of them.
func CutPieces(pieces []Piece, cl, sv int) []Piece {
	var out []Piece
	var off [2]int
	for _, pc := range pieces {
		i, from := 0, sv
		if pc.Client {
			i, from = 1, cl
		}
		p := pc.P
		if skip := from - off[i]; skip > 0 {
			p = p[min(skip, len(p)):]
		}
		off[i] += len(pc.P)
		if len(p) > 0 {
			out = append(out, Piece{Client: pc.Client, P: p})
		}
	}
	return out
}
