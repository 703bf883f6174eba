package pcapgen_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/kwatch/kwatch/internal/pcapgen"
)

var (
	client4 = netip.MustParseAddrPort("10.0.0.1:40000")
	server4 = netip.MustParseAddrPort("10.0.0.2:8001")
	client6 = netip.MustParseAddrPort("[fd00::1]:40000")
	server6 = netip.MustParseAddrPort("[fd00::2]:8001")
)

func TestConnSequenceNumbers(t *testing.T) {
	c := pcapgen.NewConn(client4, server4)
	c.SetISN(100, 0xfffffff0)
	c.Handshake()
	req := c.Send(pcapgen.Client, []byte("GET / HTTP/1.1\r\n\r\n"))
	resp := c.Send(pcapgen.Server, bytes.Repeat([]byte("x"), 40), 10)
	fin := c.Close(pcapgen.Server)
	ack2 := c.Ack(pcapgen.Client)
	segs := c.Segments()
	if len(segs) != 3+1+2+1+1 {
		t.Fatalf("%d segments, want 8", len(segs))
	}
	if ack2.Flags != pcapgen.ACK || ack2.Seq != 101+18 || ack2.Ack != fin.Seq+1 || len(ack2.Payload) != 0 {
		t.Errorf("ACK of the FIN = %+v", ack2)
	}
	syn, synack, ack := segs[0], segs[1], segs[2]
	if syn.Flags != pcapgen.SYN || syn.Seq != 100 {
		t.Errorf("SYN = %+v", syn)
	}
	if synack.Flags != pcapgen.SYN|pcapgen.ACK || synack.Seq != 0xfffffff0 || synack.Ack != 101 {
		t.Errorf("SYN+ACK = %+v", synack)
	}
	if ack.Seq != 101 || ack.Ack != 0xfffffff1 {
		t.Errorf("ACK = %+v", ack)
	}
	if req[0].Seq != 101 || req[0].Ack != 0xfffffff1 || req[0].Flags != pcapgen.ACK|pcapgen.PSH {
		t.Errorf("request = %+v", req[0])
	}
	// The server's bytes wrap around 2^32.
	if len(resp) != 2 || len(resp[0].Payload) != 10 || resp[0].Seq != 0xfffffff1 || resp[1].Seq != 0xfffffffb {
		t.Errorf("response segments = %+v, %+v", resp[0], resp[1])
	}
	if resp[1].Ack != 101+18 || resp[0].Flags&pcapgen.PSH != 0 || resp[1].Flags&pcapgen.PSH == 0 {
		t.Errorf("response acks/flags = %+v, %+v", resp[0], resp[1])
	}
	if fin.Seq != resp[1].Seq+30 || fin.Seq != 25 || fin.Flags != pcapgen.FIN|pcapgen.ACK {
		t.Errorf("FIN = %+v", fin)
	}
	if got := c.NextSeq(pcapgen.Server); got != fin.Seq+1 {
		t.Errorf("NextSeq(Server) = %d, want %d", got, fin.Seq+1)
	}
}

func TestConnEdits(t *testing.T) {
	c := pcapgen.NewConn(client4, server4)
	c.MSS = 4
	s := c.Send(pcapgen.Server, []byte("aaaabbbbccccdddd"))
	c.Wait(time.Second)
	last := c.Send(pcapgen.Server, []byte("eeee"))[0]
	c.MoveAfter(s[0], s[1])
	c.MoveBefore(s[3], s[2])
	r := c.Retransmit(s[2], nil, []byte("CCCC"))
	c.Drop(last)
	want := []string{"bbbb", "aaaa", "dddd", "cccc", "CCCC"}
	got := c.Segments()
	if len(got) != len(want) {
		t.Fatalf("%d segments, want %d", len(got), len(want))
	}
	for i, seg := range got {
		if string(seg.Payload) != want[i] {
			t.Errorf("segment %d = %q, want %q", i, seg.Payload, want[i])
		}
	}
	if r.Seq != s[2].Seq {
		t.Errorf("retransmission seq %d, want %d", r.Seq, s[2].Seq)
	}
	if r.Delay != time.Second {
		t.Errorf("the dropped segment's delay went to %v, want 1s on the segment after it", r.Delay)
	}
}

// decodeAll reads a capture back with pcapgo and decodes each packet with
// gopacket, returning the TCP layers and capture infos.
func decodeAll(t *testing.T, data []byte, ng bool) ([]*layers.TCP, []gopacket.CaptureInfo) {
	t.Helper()
	type reader interface {
		ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	}
	var rd reader
	var link layers.LinkType
	links := map[int]layers.LinkType{}
	if ng {
		r, err := pcapgo.NewNgReader(bytes.NewReader(data), pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := range r.NInterfaces() {
			intf, err := r.Interface(i)
			if err != nil {
				t.Fatal(err)
			}
			links[i] = intf.LinkType
		}
		rd = r
	} else {
		r, err := pcapgo.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		rd, link = r, r.LinkType()
	}
	var tcps []*layers.TCP
	var cis []gopacket.CaptureInfo
	for {
		b, ci, err := rd.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ng {
			link = links[ci.InterfaceIndex]
			if len(ci.AncillaryData) > 0 {
				// pcapgo's NgReader reads the interfaces lazily;
				// the packet says its link type.
				link = ci.AncillaryData[0].(layers.LinkType)
			}
		}
		var dec gopacket.Decoder = link
		switch link {
		case pcapgen.Raw, pcapgen.RawIPv4, pcapgen.RawIPv6:
			dec = layers.LayerTypeIPv4
			if b[0]>>4 == 6 {
				dec = layers.LayerTypeIPv6
			}
		}
		p := gopacket.NewPacket(b, dec, gopacket.Default)
		tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tcp == nil {
			t.Fatalf("packet %d (link %s): no TCP layer: %v", len(tcps)+1, link, p.ErrorLayer())
		}
		tcps = append(tcps, tcp)
		cis = append(cis, ci)
	}
	return tcps, cis
}

func TestLinkTypes(t *testing.T) {
	for _, tc := range []struct {
		link layers.LinkType
		v6   bool
	}{
		{pcapgen.Ethernet, false}, {pcapgen.Ethernet, true},
		{pcapgen.LinuxSLL, false}, {pcapgen.LinuxSLL2, true},
		{pcapgen.Null, false}, {pcapgen.Null, true},
		{pcapgen.Raw, false}, {pcapgen.Raw, true},
		{pcapgen.RawIPv4, false}, {pcapgen.RawIPv6, true},
	} {
		t.Run(tc.link.String(), func(t *testing.T) {
			c := pcapgen.NewConn(client4, server4)
			if tc.v6 {
				c = pcapgen.NewConn(client6, server6)
			}
			c.Handshake()
			c.Send(pcapgen.Client, []byte("hello"))
			cp := &pcapgen.Capture{Links: []layers.LinkType{tc.link}}
			if err := cp.Add(c, 0); err != nil {
				t.Fatal(err)
			}
			data, err := cp.Encode(pcapgen.Options{})
			if err != nil {
				t.Fatal(err)
			}
			tcps, cis := decodeAll(t, data, false)
			if len(tcps) != 4 || string(tcps[3].Payload) != "hello" || !tcps[0].SYN || tcps[0].DstPort != 8001 {
				t.Fatalf("decoded %d packets; last payload %q", len(tcps), tcps[len(tcps)-1].Payload)
			}
			if cis[3].Timestamp != pcapgen.DefaultBase.Add(3*time.Millisecond) {
				t.Errorf("packet 4 at %v", cis[3].Timestamp)
			}
		})
	}
	c := pcapgen.NewConn(client4, server4)
	c.Send(pcapgen.Client, []byte("x"))
	if err := (&pcapgen.Capture{Links: []layers.LinkType{pcapgen.RawIPv6}}).Add(c, 0); err == nil {
		t.Error("IPv4 on link type 229: no error")
	}
}

func TestEncodeOptions(t *testing.T) {
	c := pcapgen.NewConn(client4, server4)
	c.Handshake()
	c.Send(pcapgen.Server, bytes.Repeat([]byte("y"), 300))
	cp := &pcapgen.Capture{Snaplen: 100, Base: pcapgen.DefaultBase.Add(7 * time.Nanosecond)}
	if err := cp.Add(c, 0); err != nil {
		t.Fatal(err)
	}
	le, err := cp.Encode(pcapgen.Options{Nanos: true})
	if err != nil {
		t.Fatal(err)
	}
	be, err := cp.Encode(pcapgen.Options{Nanos: true, BigEndian: true})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(be, []byte{0xa1, 0xb2, 0x3c, 0x4d}) || !bytes.HasPrefix(le, []byte{0x4d, 0x3c, 0xb2, 0xa1}) {
		t.Fatalf("magic: big-endian % x, little-endian % x", be[:4], le[:4])
	}
	for _, data := range [][]byte{le, be} {
		_, cis := decodeAll(t, data, false)
		last := cis[len(cis)-1]
		if last.CaptureLength != 100 || last.Length != 14+20+20+300 {
			t.Errorf("snaplen: captured %d of %d", last.CaptureLength, last.Length)
		}
		if cis[0].Timestamp.Nanosecond() != 7 {
			t.Errorf("timestamp %v lost its nanoseconds", cis[0].Timestamp)
		}
	}
	gz, err := cp.Encode(pcapgen.Options{Nanos: true, Gzip: true})
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(plain, le) {
		t.Errorf("gzip'd capture differs from the plain one (%v)", err)
	}
	cut, err := cp.Encode(pcapgen.Options{Nanos: true, CutBytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(bytes.NewReader(cut))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		_, _, err := r.ReadPacketData()
		if err != nil {
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("after %d packets: %v, want unexpected EOF", n, err)
			}
			break
		}
		n++
	}
	if n != 3 {
		t.Errorf("%d complete packets before the cut, want 3", n)
	}
}

func TestPcapNGTwoInterfaces(t *testing.T) {
	a := pcapgen.NewConn(client4, server4)
	a.Send(pcapgen.Client, []byte("on ethernet"))
	b := pcapgen.NewConn(client6, server6)
	b.Send(pcapgen.Client, []byte("on raw IPv6"))
	cp := &pcapgen.Capture{Links: []layers.LinkType{pcapgen.Ethernet, pcapgen.Raw}}
	if err := cp.Add(a, 0); err != nil {
		t.Fatal(err)
	}
	if err := cp.Add(b, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Encode(pcapgen.Options{}); err == nil {
		t.Error("a pcap file with packets on interface 1: no error")
	}
	data, err := cp.Encode(pcapgen.Options{Format: pcapgen.PcapNG})
	if err != nil {
		t.Fatal(err)
	}
	again, _ := cp.Encode(pcapgen.Options{Format: pcapgen.PcapNG})
	if !bytes.Equal(data, again) {
		t.Error("encoding twice gave different bytes")
	}
	tcps, cis := decodeAll(t, data, true)
	if len(tcps) != 2 || string(tcps[1].Payload) != "on raw IPv6" || cis[1].InterfaceIndex != 1 {
		t.Fatalf("decoded %d packets: %+v", len(tcps), cis)
	}
}

// TestInterleave adds two connections in turns: each Add lays out only the
// segments made since the last one, so the packets interleave.
func TestInterleave(t *testing.T) {
	a := pcapgen.NewConn(client4, server4)
	b := pcapgen.NewConn(netip.AddrPortFrom(client4.Addr(), client4.Port()+1), server4)
	cp := &pcapgen.Capture{}
	add := func(c *pcapgen.Conn) {
		if err := cp.Add(c, 0); err != nil {
			t.Fatal(err)
		}
	}
	a.SYN()
	add(a)
	b.SYN()
	add(b)
	a.Send(pcapgen.Client, []byte("a1"))
	add(a)
	b.Send(pcapgen.Client, []byte("b1"))
	add(b)
	add(b) // nothing new
	data, err := cp.Encode(pcapgen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tcps, _ := decodeAll(t, data, false)
	var got []string
	for _, tcp := range tcps {
		got = append(got, fmt.Sprintf("%d:%s:%v", tcp.SrcPort, tcp.Payload, tcp.SYN))
	}
	want := fmt.Sprintf("[%d::true %d::true %d:a1:false %d:b1:false]", client4.Port(), client4.Port()+1, client4.Port(), client4.Port()+1)
	if fmt.Sprint(got) != want {
		t.Errorf("packets %v; want %s", got, want)
	}
	if tcps[2].Seq != tcps[0].Seq+1 {
		t.Errorf("data after a lone SYN at seq %d; want %d", tcps[2].Seq, tcps[0].Seq+1)
	}
}
