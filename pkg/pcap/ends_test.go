package pcap_test

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/pcapgen"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/record"
)

// TestResetDatedByItsPacket: a connection ended by a RST is ended at the
// RST's packet, both directions, not when the capture ends on another
// connection. rst-mid-watch.pcap (../shared/captures/README.md): a client
// that never reads its watch closes with unread data, so its kernel sends a
// RST at 05:02:01.942970; the capture's last packet is 4.3 s later.
func TestResetDatedByItsPacket(t *testing.T) {
	f, err := os.Open(filepath.Join(captureDir, "rst-mid-watch.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rst := time.Date(2026, 12, 1, 5, 2, 1, 942970000, time.UTC)
	var ends []*record.End
	var notes []*record.ConnNote
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.End:
			if v.Conn.Client.Port() == 38944 {
				ends = append(ends, v)
			}
		case *record.ConnNote:
			if v.Conn.Client.Port() == 38944 && v.Kind == "closed" {
				notes = append(notes, v)
			}
		}
	})
	if _, err := pcap.Read(context.Background(), f, pcap.Options{Name: "rst-mid-watch.pcap"}, sink); err != nil {
		t.Fatal(err)
	}
	if len(ends) != 1 || len(notes) != 1 {
		t.Fatalf("%d end records and %d closed notes for port 38944, want 1 and 1", len(ends), len(notes))
	}
	if e := ends[0]; !e.Time.Equal(rst) || e.How != "reset without the last chunk" || e.Duration < 900*time.Millisecond || e.Duration > time.Second {
		t.Errorf("watch ended %q at %s after %s, want reset at the RST's time %s, after about 1 s (the client slept 1 s)",
			e.How, e.Time.Format(time.RFC3339Nano), e.Duration, rst.Format(time.RFC3339Nano))
	}
	if !notes[0].Time.Equal(rst) || notes[0].Message != "connection reset (RST)" {
		t.Errorf("note %q at %s, want the reset at the RST's time", notes[0].Message, notes[0].Time.Format(time.RFC3339Nano))
	}
}

// TestClosedConnectionsDoNotCount: connections that ended (FIN both ways,
// then the last ACK, which makes gopacket start a stream of its own) are
// not "open at once": 300 of them one after another, with room for 100
// open connections, give no "too many connections" problem, and the
// summary counts 300.
func TestClosedConnectionsDoNotCount(t *testing.T) {
	cp := &pcapgen.Capture{Step: time.Microsecond}
	for i := range 300 {
		c := pcapgen.NewConn(netip.AddrPortFrom(netip.MustParseAddr("10.0.1.1"), uint16(20000+i)),
			netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), 8001))
		c.Handshake()
		c.Send(pcapgen.Client, []byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
		c.Send(pcapgen.Server, []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
		c.Close(pcapgen.Client)
		c.Close(pcapgen.Server)
		c.Ack(pcapgen.Client)
		if err := cp.Add(c, 0); err != nil {
			t.Fatal(err)
		}
	}
	data, err := cp.Encode(pcapgen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	var sum *record.Summary
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Problem:
			problems = append(problems, v.Kind)
		case *record.Summary:
			sum = v
		}
	})
	if _, err := pcap.Read(context.Background(), bytes.NewReader(data), pcap.Options{MaxConnections: 100}, sink); err != nil {
		t.Fatal(err)
	}
	if len(problems) != 0 || sum == nil || sum.Connections != 300 {
		t.Errorf("problems %v, summary %+v; want none and 300 connections", problems, sum)
	}
}
