package pcap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/kwatch/kwatch/pkg/h2conn"
	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/printer"
	"github.com/kwatch/kwatch/pkg/record"
)

// cutCapture returns a pcap holding the packets of file from packet from
// on: what tcpdump would have written had it started then.
func cutCapture(t *testing.T, file string, from int) []byte {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := pcapgo.NewWriter(&out)
	if err := w.WriteFileHeader(r.Snaplen(), r.LinkType()); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		b, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i >= from {
			if err := w.WritePacket(ci, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out.Bytes()
}

// TestJoinedCaptures starts each recorded HTTP/2 watch (h2c, on -i lo and
// -i any) at every one of its packets, as tcpdump or kwatch attach started
// late would: kwatch pcap decodes each as HTTP/2 joined mid-connection,
// and its events are the last ones client-go decoded from the same
// connection (its events file), each watch's a suffix of its own: none
// guessed, none changed, none lost after the first that starts a DATA
// frame after the join.
func TestJoinedCaptures(t *testing.T) {
	for _, name := range []string{"h2c-watch", "h2c-gzip", "h2c-reset"} {
		data, err := os.ReadFile(filepath.Join(recordedDir, name+".events.json"))
		if err != nil {
			t.Fatal(err)
		}
		var truth []groundTruth
		if err := json.Unmarshal(data, &truth); err != nil {
			t.Fatal(err)
		}
		for _, link := range []string{"lo", "any"} {
			file := filepath.Join(recordedDir, name+"-"+link+".pcap")
			t.Run(filepath.Base(file), func(t *testing.T) {
				t.Parallel()
				total := 0
				// The events file lists each watch's events in a run
				// (a BOOKMARK is the watch's of the events around it).
				var runs [][]groundTruth
				for i, ev := range truth {
					if i == 0 || ev.Name != "" && ev.Name != runs[len(runs)-1][0].Name {
						runs = append(runs, nil)
					}
					runs[len(runs)-1] = append(runs[len(runs)-1], ev)
				}
				for from := 1; ; from++ {
					capture := cutCapture(t, file, from)
					if len(capture) <= 24 {
						break
					}
					byStream := map[int][]groundTruth{}
					var problems []string
					joined, preface := false, false
					sink := record.SinkFunc(func(r record.Record) {
						switch v := r.(type) {
						case *record.Event:
							byStream[v.Exchange] = append(byStream[v.Exchange], groundTruth{v.Type, v.Name, v.ResourceVersion})
							total++
						case *record.Problem:
							// (The server's RST_STREAM INTERNAL_ERROR of
							// h2c-reset is a warning wherever the capture
							// joins: cut_test.go.)
							if v.Kind != h2conn.KindJoinNoFrames && v.Kind != record.KindCut {
								problems = append(problems, v.Kind+": "+v.Detail)
							}
						case *record.ConnNote:
							joined = joined || v.Kind == "h2-joined"
							preface = preface || v.Kind == "h2" && strings.HasPrefix(v.Message, "HTTP/2 (the client's connection preface)")
						}
					})
					if _, err := pcap.Read(context.Background(), bytes.NewReader(capture), pcap.Options{Name: name}, sink); err != nil {
						t.Fatal(err)
					}
					if len(problems) > 0 {
						t.Errorf("from packet %d: problems %q", from, problems)
					}
					for stream, got := range byStream {
						i := slices.IndexFunc(runs, func(run []groundTruth) bool { return slices.Contains(run, got[len(got)-1]) })
						if i < 0 || len(got) > len(runs[i]) || !slices.Equal(got, runs[i][len(runs[i])-len(got):]) {
							t.Errorf("from packet %d: stream %d's events %v; want the last of a watch's in %v", from, stream, got, runs)
						}
					}
					if len(byStream) > 0 && !joined && !preface {
						t.Errorf("from packet %d: events without an h2-joined note", from)
					}
				}
				if total == 0 {
					t.Error("no cut gave an event")
				}
			})
		}
	}
}

// TestJoinedOutput shows what kwatch pcap prints for a capture of two
// watches on one HTTP/2 connection that starts after the first watch's
// HEADERS, and before the second's request (whose :authority, user-agent
// and accept, and its response's content-type, are HPACK entries from
// before the join).
func TestJoinedOutput(t *testing.T) {
	capture := cutCapture(t, filepath.Join(recordedDir, "h2c-reset-lo.pcap"), 14)
	var out bytes.Buffer
	p := printer.NewPretty(&out, printer.Options{AllHTTP: true})
	if _, err := pcap.Read(context.Background(), bytes.NewReader(capture), pcap.Options{Name: "h2c-reset-lo.pcap"}, p); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("\n%s", text)
	for _, want := range []string{
		"HTTP/2, joined mid-connection: the server's first bytes are HTTP/2 frames",
		// The stream whose request was not seen is named on its
		// response's line, from its first event's object.
		"#1 s1 < HTTP/2.0 200 (HEADERS not captured: joined mid-connection) · application/json · watch of v1 ConfigMap (request not seen: named by its first event's object, in namespace default; the namespace watched not known) · inferred from the body",
		"#1 s3 > GET /api/v1/namespaces/default/configmaps?watch=1&resourceVersion=100&fieldSelector=metadata.name%3Dsecond HTTP/2.0 · 3 header fields not known (HPACK entries",
		"#1 s3 < HTTP/2.0 200 OK · application/json · watch · inferred from the body · 1 header field not known (HPACK entry",
		"#1 s3   1 ADDED     ConfigMap default/second  rv 101",
		"#1 s3   2 MODIFIED  ConfigMap default/second  rv 102",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// In one line: the note that names it (JSON Lines have it) is said
	// on the response's.
	if strings.Contains(text, "stream 1: its request was not seen") {
		t.Error("the stream joined mid-connection is named on a line of its own too")
	}
	// The one warning: the server's RST_STREAM INTERNAL_ERROR of stream 3,
	// which joining does not hide.
	if !strings.Contains(text, "stream 3: watch ended by the server (RST_STREAM INTERNAL_ERROR from the server, after 2 events in 302ms)") ||
		!strings.Contains(text, " 0 problems, 1 warning") {
		t.Error("problems or warnings other than the server's RST_STREAM")
	}
}
