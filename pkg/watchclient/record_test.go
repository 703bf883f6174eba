package watchclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/pkg/pcap"
	"github.com/kwatch/kwatch/pkg/pcapwriter"
	"github.com/kwatch/kwatch/pkg/record"
)

// eventLine is what a round trip must keep of an event.
func eventLine(e *record.Event) string {
	var sizes []string
	for _, c := range e.Chunks {
		sizes = append(sizes, fmt.Sprintf("%d/%s@%d", c.Size, c.SizeLine, c.Offset))
	}
	return fmt.Sprintf("%s %s rv %s [%s] %d bytes", e.Type, e.Name, e.ResourceVersion, strings.Join(sizes, " "), e.Length)
}

// TestRecordRoundTrip records a live session with the pcap Writer and
// decodes the file with kwatch pcap's path: the events, their chunks, and the
// exchanges must be the same as live.
func TestRecordRoundTrip(t *testing.T) {
	objs := recordedObjects(t)
	ev := func(typ string, obj json.RawMessage) string { return fmt.Sprintf(`{"type":%q,"object":%s}`, typ, obj) }
	fs := &fakeServer{t: t, list: []string{listBody("150")}, watches: []func(http.ResponseWriter, *http.Request){
		events(ev("ADDED", objs[0]), ev("MODIFIED", objs[1])),
		events(ev("MODIFIED", objs[2]), ev("DELETED", objs[3])),
	}}
	var file bytes.Buffer
	w, err := pcapwriter.New(&file)
	if err != nil {
		t.Fatal(err)
	}
	sink, _, _ := runUntil(t, fs, WatchOptions{Namespace: "kube-system"}, 3, ConnectOptions{Record: w})
	var live []string
	for _, r := range sink.snapshot() {
		if e, ok := r.(*record.Event); ok {
			live = append(live, eventLine(e))
		}
	}
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	var decoded []string
	var problems []string
	ends := 0
	if _, err := pcap.Read(context.Background(), bytes.NewReader(file.Bytes()), pcap.Options{Name: "recorded"}, record.SinkFunc(func(r record.Record) {
		switch v := r.(type) {
		case *record.Event:
			decoded = append(decoded, eventLine(v))
		case *record.Problem:
			problems = append(problems, v.Kind)
		case *record.End:
			ends++
		}
	})); err != nil {
		t.Fatal(err)
	}
	if len(live) != 4 || strings.Join(live, "\n") != strings.Join(decoded, "\n") {
		t.Errorf("live:\n%s\nfrom the recording:\n%s", strings.Join(live, "\n"), strings.Join(decoded, "\n"))
	}
	if len(problems) > 0 || ends != 3 {
		t.Errorf("problems %v, %d bodies ended (want 3 watches)", problems, ends)
	}
}
