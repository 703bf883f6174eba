package wire_test

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/exchange"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/wire"
)

// TestMidStream: a capture that begins inside a watch body (tcpdump started
// while the watch was open) still yields the events after the first chunk
// boundary it can find.
func TestMidStream(t *testing.T) {
	ev := func(rv int) string {
		return fmt.Sprintf(`{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"ns","resourceVersion":"%d"},"data":{"k":"%s"}}}`+"\n", rv, strings.Repeat("v", 50))
	}
	var body strings.Builder
	for rv := 10; rv < 14; rv++ {
		e := ev(rv)
		fmt.Fprintf(&body, "%x\r\n%s\r\n", len(e), e)
	}
	full := body.String()
	cut := full[40:] // inside the first event
	var got []string
	var notes []string
	sink := record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Event:
			got = append(got, v.Type+" "+v.ResourceVersion)
		case *record.ConnNote:
			notes = append(notes, v.Kind)
		}
	})
	c := wire.New(&record.Conn{ID: 1}, sink, wire.Options{MidStream: true})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < len(cut); i += 7 {
		c.ServerData([]byte(cut[i:min(i+7, len(cut))]), now)
	}
	c.CloseServer(exchange.EndFIN, now)
	if strings.Join(got, ",") != "MODIFIED 11,MODIFIED 12,MODIFIED 13" || len(notes) == 0 || notes[0] != "mid-stream" {
		t.Errorf("events %v, notes %v", got, notes)
	}

	// Without MidStream, or with bytes that are not text, it stays a
	// "not HTTP" note (said when the stream ends: until then the bytes
	// may be the rest of an HTTP/2 frame, with frames after them).
	got, notes = nil, nil
	c = wire.New(&record.Conn{ID: 2}, sink, wire.Options{MidStream: true})
	c.ServerData([]byte("\x00\x01\x02binary protocol\r\n3\r\nabc\r\n"), now)
	c.CloseServer(exchange.EndFIN, now)
	if len(got) != 0 || len(notes) != 1 || notes[0] != "not-http" {
		t.Errorf("binary: events %v, notes %v", got, notes)
	}
}

// TestTLSNotes: a connection caught after its TLS handshake (records of
// application data, 17 03 03) is named TLS, not "not HTTP/1.1", and a
// connection gets one TLS note, not one per direction.
func TestTLSNotes(t *testing.T) {
	for _, tc := range []struct {
		name           string
		client, server []byte
		want           string
	}{
		{"after the handshake", []byte{0x17, 0x03, 0x03, 0x00, 0x21, 1, 2, 3}, []byte{0x17, 0x03, 0x03, 0x01, 0x00, 4, 5, 6},
			"TLS records (version 3.3) after the handshake, which the capture missed: encrypted, not decoded"},
		{"handshake cut short", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 1}, []byte{0x16, 0x03, 0x03, 0x00, 0x7a, 2},
			"TLS handshake, cut short before a hello was complete: encrypted, not decoded"},
		{"not a hello", []byte{0x16, 0x03, 0x01, 0x00, 0x04, 20, 0, 0, 0}, nil,
			"TLS handshake that could not be read (first handshake message is of type 20, not a hello): encrypted, not decoded"},
	} {
		var notes []string
		sink := record.SinkFunc(func(r record.Record) {
			if n, ok := r.(*record.ConnNote); ok {
				notes = append(notes, n.Kind+": "+n.Message)
			}
		})
		c := wire.New(&record.Conn{ID: 1}, sink, wire.Options{})
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		c.ClientData(tc.client, now)
		c.ServerData(tc.server, now)
		c.CloseClient(exchange.EndFIN, now)
		c.CloseServer(exchange.EndFIN, now)
		if len(notes) != 1 || !strings.HasPrefix(notes[0], "tls: "+tc.want) {
			t.Errorf("%s: notes %q, want one starting %q", tc.name, notes, "tls: "+tc.want)
		}
	}
}

// TestMidStreamGzipCaptures cuts the recorded gzip'd HTTP/1.1 watch-list
// (kube-apiserver through kubectl proxy: Content-Encoding gzip, one gzip
// member per chunk) where a capture that began later would: at each of the
// server's packets after the status line and inside them. Each cut is
// decoded as a chunked gzip'd body joined in the middle: its events are
// those of the whole connection from the first chunk that starts after the
// cut, with the same chunks, whole packets or byte by byte, and the note
// says the body is gzip'd. A cut inside the status line or header section, or in the last
// chunk, decodes no event and says nothing wrong.
func TestMidStreamGzipCaptures(t *testing.T) {
	pieces := testutil.ConnPieces(t, "../../testdata/captures/watchlist-gzip-lo.pcap")
	whole := runJoined(t, pieces, 0)
	evs := whole.events[1]
	if len(evs) != 7 || whole.resps[1] == nil || whole.resps[1].ContentEncoding != "gzip" {
		t.Fatalf("the whole connection: %d events, response %+v", len(evs), whole.resps[1])
	}
	var sv []byte
	for _, pc := range pieces {
		if !pc.Client {
			sv = append(sv, pc.P...)
		}
	}
	bodyAt := bytes.Index(sv, []byte("\r\n\r\n")) + 4
	text := func(ev *record.Event) string {
		var ch []string
		for _, c := range ev.Chunks {
			ch = append(ch, c.SizeLine)
		}
		return fmt.Sprintf("%s %s rv %s chunks %s", ev.Type, ev.Name, ev.ResourceVersion, strings.Join(ch, "+"))
	}
	cuts, decoded := 0, 0
	off := 0
	for _, pc := range pieces {
		if pc.Client {
			continue
		}
		for _, d := range []int{0, 1, 2, len(pc.P) / 2} {
			cut := off + d
			if cut <= bodyAt || cut >= len(sv) {
				continue
			}
			cuts++
			step := []int{0, 1, 100}[cuts%3] // whole packets, byte by byte, or in between
			got := runJoined(t, testutil.CutPieces(pieces, 1<<30, cut), step)
			what := fmt.Sprintf("cut at server byte %d, written %d bytes at a time", cut, step)
			// The first chunk that starts where the cut lets it be
			// seen: its size line at the cut, or after a CRLF after it.
			var want []string
			for _, ev := range evs {
				c := ev.Chunks[0]
				at := bodyAt + int(c.Offset)
				if ev.Chunks[0].Ordinal == 1 && (at == cut || at-2 >= cut) || len(want) > 0 {
					want = append(want, text(ev))
				}
			}
			var have []string
			for _, ev := range got.events[1] {
				have = append(have, text(ev))
			}
			if !slices.Equal(have, want) {
				t.Fatalf("%s: events\n%s\nwant\n%s", what, strings.Join(have, "\n"), strings.Join(want, "\n"))
			}
			for _, p := range got.problems {
				t.Errorf("%s: problem %s: %s", what, p.Kind, p.Detail)
			}
			if len(want) > 0 {
				decoded++
				r := got.resps[1]
				if r == nil || !r.Inferred || r.ContentEncoding != "gzip" || r.Format != "json" {
					t.Errorf("%s: response %+v", what, r)
				}
				if !slices.ContainsFunc(got.notes, func(n *record.ConnNote) bool {
					return n.Kind == "mid-stream" && strings.Contains(n.Message, "gzip'd")
				}) {
					t.Errorf("%s: no mid-stream note", what)
				}
			}
		}
		off += len(pc.P)
	}
	if decoded < cuts/2 {
		t.Errorf("only %d of %d cuts decoded events", decoded, cuts)
	}
	t.Logf("%d cuts, %d decoded events", cuts, decoded)
}
