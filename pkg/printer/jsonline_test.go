package printer

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// encodeStd is what encoding/json writes for ev, without the newline.
func encodeStd(t *testing.T, ev *jsonEvent) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func TestEventLine(t *testing.T) {
	zero, big := int64(0), int64(1<<40)
	full := jsonEvent{Record: "event", Type: "MODIFIED", Object: json.RawMessage(`{"kind":"ConfigMap","data":{"a":"<&>"}}`),
		Chunks: []jsonChunk{{Size: 938, SizeLine: "3aa", Offset: 0, Index: 0, Events: 1, Bytes: 938, DataAt: &zero, Wire: "33 61 61 0d 0a"},
			{Size: 5, SizeLine: "5;ext=\"q\"", Offset: 945, Index: 1, Events: 2, Ordinal: 2, Bytes: 3, DataAt: &big, Inflated: -1}},
		Connection: "[::1]:5 -> [::1]:8001", Node: "worker-1", Time: "2026-11-29T21:31:09.004830000Z", Exchange: 2, Seq: 7,
		APIVersion: "v1", Kind: "ConfigMap", Namespace: "kube-system", Name: "coredns", UID: "9f3c", ResourceVersion: "152", InitialEventsEnd: true,
		Offset: -1, Length: 1 << 40, Format: "json", Diff: json.RawMessage(`{"data":{"a":null}}`)}
	for _, ev := range []jsonEvent{
		full,
		{Record: "event", Type: "ERROR", Object: json.RawMessage(`null`), Format: "protobuf"},
		{Record: "event", Chunks: []jsonChunk{}, Object: json.RawMessage(`{}`)},
		{Record: "event", Chunks: []jsonChunk{}, Object: json.RawMessage(`{}`), Frames: []jsonFrame{
			{Stream: 3, Index: 0, Length: 16384, Offset: 24, Events: 2, Ordinal: 1, Bytes: 900, DataAt: &zero, Inflated: 2000},
			{Stream: 1<<31 - 1, Index: 12, Length: 3825, Padded: true, Padding: 10, EndStream: true, Offset: 1 << 40, DataAt: &big}}},
		{Record: "event", Type: "ADDED", Object: json.RawMessage(`["a"]`), Kind: "Table", RowKind: "PartialObjectMetadata", Initial: true, NotObject: "array"},
		{Record: "event", Type: "\x00\x1f\"\\\b\f\n\r\t\u2028\u2029\xff\xc3(é😀<>&\x7f", Object: json.RawMessage(`1`)},
	} {
		got := appendEventLine(nil, &ev)
		if want := encodeStd(t, &ev); !bytes.Equal(got, want) {
			t.Errorf("appendEventLine:\n got %s\nwant %s", got, want)
		}
	}
}

// FuzzEventLine: every string field is written as encoding/json writes it.
func FuzzEventLine(f *testing.F) {
	f.Add("ADDED", "coredns", "3aa;x=\"\\\"", "\xff\u2028\x01", int64(938))
	f.Fuzz(func(t *testing.T, typ, name, sizeLine, wire string, n int64) {
		ev := jsonEvent{Record: "event", Type: typ, Name: name, Namespace: wire, Kind: typ, ResourceVersion: sizeLine,
			Object: json.RawMessage(`{}`), Chunks: []jsonChunk{{Size: n, SizeLine: sizeLine, Offset: -n, Wire: wire}},
			Connection: name, Time: wire, Seq: int(n), Length: n, Format: sizeLine}
		if got, want := appendEventLine(nil, &ev), encodeStd(t, &ev); !bytes.Equal(got, want) {
			t.Fatalf("appendEventLine:\n got %s\nwant %s", got, want)
		}
	})
}

// TestTimeText holds timeText, which keeps the last second's text, to
// time.Format in the layouts the printers use, across seconds, zones,
// years of other widths, and times before 1970.
func TestTimeText(t *testing.T) {
	times := []time.Time{
		time.Date(2026, 1, 1, 0, 0, 0, 50000, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 999999999, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC),
		time.Date(2026, 1, 1, 1, 0, 1, 7, time.FixedZone("CET", 3600)), // the same second as the one before
		time.Date(1969, 12, 31, 23, 59, 59, 5, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 58, 5, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 1, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 1, time.UTC),
	}
	for _, tc := range []struct {
		layout string
		local  bool
	}{{timeFormat, false}, {"2006-01-02T15:04:05.000000Z07:00", false}, {"15:04:05.000000", true}} {
		c := newTimeText(tc.layout, tc.local)
		for _, tm := range times {
			want := tm.UTC().Format(tc.layout)
			if tc.local {
				want = tm.Local().Format(tc.layout)
			}
			if got := c.format(tm); got != want {
				t.Errorf("%s: %v: %q, want %q", tc.layout, tm, got, want)
			}
		}
	}
}
