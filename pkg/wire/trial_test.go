package wire_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/h2conn"
	"github.com/kwatch/kwatch/pkg/keylog"
	"github.com/kwatch/kwatch/pkg/record"
)

// runKeyed runs one connection's pieces, each written whole, through a
// switchboard with the key log text keys (kwatch pcap --tls-keylog):
// runShared with a key log of its own.
func runKeyed(t *testing.T, pieces []testutil.Piece, keys []byte) *joined {
	t.Helper()
	kl := keylog.New()
	kl.Add(keys, "keys.log")
	return runShared(t, kl, [][]testutil.Piece{pieces})
}

// TestTrialCaptures cuts the recorded TLS 1.3 HTTP/2 watch (client-go's
// transport against the API server, with its key log) at each packet after
// the handshake, as a capture that began there would hold it: its client
// random is never seen, so its secrets are found by trying the key log's
// (tlsconn's trial). At every cut the connection is decrypted, its note
// names the client random the secrets are logged under, and the events are
// the whole connection's from some event on (those whose records came
// before the secrets were found cannot be), the last one always among
// them. Records passed over are a warning, never an error. A key log that
// holds another connection's secrets only, or that is truncated to lines
// of no TLS 1.3 traffic secret, leaves it encrypted, said in its note.
func TestTrialCaptures(t *testing.T) {
	pieces := testutil.ConnPieces(t, "../../testdata/captures/tls13-h2-lo.pcap")
	keys, err := os.ReadFile("../../testdata/captures/tls13-h2.keys.log")
	if err != nil {
		t.Fatal(err)
	}
	text := func(j *joined) []string {
		var out []string
		for _, evs := range j.events {
			for _, ev := range evs {
				out = append(out, fmt.Sprintf("%s %s rv %s", ev.Type, ev.Name, ev.ResourceVersion))
			}
		}
		return out
	}
	whole := text(runKeyed(t, pieces, keys))
	if len(whole) != 4 {
		t.Fatalf("the whole connection: events %v", whole)
	}
	random := strings.Fields(strings.SplitN(string(keys), "\n", 2)[0])[1]
	cl, sv := 0, 0
	cuts := 0
	for k, pc := range pieces {
		if k >= 3 { // after the ClientHello, the ServerHello flight and the client's Finished
			cuts++
			got := runKeyed(t, testutil.CutPieces(pieces, cl, sv), keys)
			evs := text(got)
			what := fmt.Sprintf("cut before piece %d (client %d, server %d)", k, cl, sv)
			if len(evs) > 0 && !slices.Equal(evs, whole[len(whole)-len(evs):]) {
				t.Errorf("%s: events %v, not the end of %v", what, evs, whole)
			}
			// Up to the client's first WINDOW_UPDATE after the
			// ADDED, every event; cut before the DELETED's one large
			// record, the server's first, that too: it waits for the
			// client's small records to find the secrets.
			if k <= 9 && len(evs) != 4 || k == 15 && len(evs) != 1 {
				t.Errorf("%s: events %v", what, evs)
			}
			if !slices.ContainsFunc(got.notes, func(n *record.ConnNote) bool {
				return n.Kind == "tls-decrypted" && strings.Contains(n.Message, "client random "+random+", found by trying them")
			}) && len(evs) > 0 {
				t.Errorf("%s: no note of the secrets found by trying: %v", what, got.notes)
			}
			for _, p := range got.problems {
				// Too few frames after the cut to find HTTP/2's
				// boundary is the HTTP/2 join's own verdict.
				if !p.Warning && p.Kind != h2conn.KindJoinNoFrames {
					t.Errorf("%s: problem %s: %s", what, p.Kind, p.Detail)
				}
			}
		}
		if pc.Client {
			cl += len(pc.P)
		} else {
			sv += len(pc.P)
		}
	}
	t.Logf("%d cuts", cuts)

	// The secrets of another connection only: nothing opens.
	var other []string
	for _, line := range strings.Split(string(keys), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			other = append(other, f[0]+" "+strings.Repeat("ab", 32)+" "+strings.Repeat("cd", len(f[2])/2))
		}
	}
	cut := testutil.CutPieces(pieces, 1831, 1941) // at records' starts, after the handshake
	got := runKeyed(t, cut, []byte(strings.Join(other, "\n")+"\n"))
	if len(got.events) != 0 || !slices.ContainsFunc(got.notes, func(n *record.ConnNote) bool {
		return n.Kind == "tls" && strings.Contains(n.Message, "none of the key log's 1 TLS 1.3 connections that no captured handshake claimed opened the 9 records tried with a sequence number below 4096")
	}) {
		t.Errorf("another connection's secrets: events %v, notes %v", got.events, noteText(got.notes))
	}
	// No TLS 1.3 traffic secret at all: the note of old.
	got = runKeyed(t, cut, []byte("CLIENT_RANDOM "+strings.Repeat("ab", 32)+" "+strings.Repeat("cd", 48)+"\n"))
	if len(got.events) != 0 || !slices.ContainsFunc(got.notes, func(n *record.ConnNote) bool {
		return n.Kind == "tls" && strings.HasPrefix(n.Message, "TLS records after the handshake, which the capture missed") && !strings.Contains(n.Message, "tried")
	}) {
		t.Errorf("no TLS 1.3 secret: events %v, notes %v", got.events, noteText(got.notes))
	}
}

func noteText(ns []*record.ConnNote) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Kind+": "+n.Message)
	}
	return out
}
