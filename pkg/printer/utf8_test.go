package printer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kwatch/kwatch/pkg/event"
	"github.com/kwatch/kwatch/pkg/record"
)

// invalidUTF8 are byte strings that are not UTF-8, as in
// kubernetes-client/python's test_watch_with_invalid_utf8, with the number
// of U+FFFD encoding/json writes for each (one per byte: a lone
// continuation byte, an overlong encoding of '/', and an overlong
// three-byte one).
var invalidUTF8 = []struct {
	name  string
	bytes string
	fffd  int
}{
	{"lone continuation byte", "\x80", 1},
	{"overlong two bytes", "\xc0\xaf", 2},
	{"overlong three bytes", "\xe0\x80\xaf", 3},
}

// jsonLines returns the lines of out, failing the test unless all of out
// is valid UTF-8 and every line is a JSON object.
func jsonLines(t *testing.T, out []byte) [][]byte {
	t.Helper()
	if !utf8.Valid(out) {
		t.Errorf("output is not valid UTF-8: %q", out)
	}
	lines := bytes.Split(bytes.TrimSuffix(out, []byte("\n")), []byte("\n"))
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Errorf("line is not JSON: %v: %q", err, l)
		}
	}
	return lines
}

// TestJSONInvalidUTF8: a watch event whose object holds bytes that are not
// UTF-8 is written as JSON text (RFC 8259 §8.1), each such byte as the
// \ufffd encoding/json writes for it in a Go string, and its byte counts
// stay those of the wire.
func TestJSONInvalidUTF8(t *testing.T) {
	for _, tc := range invalidUTF8 {
		t.Run(tc.name, func(t *testing.T) {
			value := "a" + tc.bytes + "b"
			frame := []byte(`{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap",` +
				`"metadata":{"name":"cm","namespace":"default","resourceVersion":"7"},"data":{"k":"` + value + `"}}}` + "\n")
			ev, err := event.Decode(event.FormatJSON, frame, event.DecodeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(ev.Object, []byte(tc.bytes)) {
				t.Fatalf("decoded object %q does not hold the bytes as sent", ev.Object)
			}
			n := int64(len(frame))
			rec := &record.Event{Conn: &record.Conn{ID: 1}, Exchange: 1, Seq: 1, Type: ev.Type, Object: ev.Object,
				APIVersion: ev.APIVersion, Kind: ev.Kind, Namespace: ev.Namespace, Name: ev.Name,
				ResourceVersion: ev.ResourceVersion, Offset: 0, Length: n, Format: "json",
				Diff:   json.RawMessage(`{"data":{"k":"` + value + `"}}`),
				Chunks: []record.Chunk{{Index: 0, Size: n, SizeLine: fmt.Sprintf("%x", n), Offset: 0, Events: 1, Bytes: n}}}
			objectBefore := bytes.Clone(rec.Object)

			var out bytes.Buffer
			j := NewJSON(&out, Options{})
			j.Emit(rec)
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			lines := jsonLines(t, out.Bytes())
			line := lines[len(lines)-1]

			// What encoding/json writes for the Go string value.
			want, err := json.Marshal(value)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Count(want, []byte(`\ufffd`)); got != tc.fffd {
				t.Fatalf("encoding/json writes %s for %q: %d \\ufffd, want %d", want, value, got, tc.fffd)
			}
			for _, field := range []string{`"data":{"k":` + string(want) + `}`, `"diff":{"data":{"k":` + string(want) + `}}`} {
				if !bytes.Contains(line, []byte(field)) {
					t.Errorf("event line does not hold %s:\n%s", field, line)
				}
			}
			if got := bytes.Count(line, []byte(`\ufffd`)); got != 2*tc.fffd {
				t.Errorf("event line holds %d \\ufffd, want %d:\n%s", got, 2*tc.fffd, line)
			}

			var got struct {
				Object struct {
					Data map[string]string `json:"data"`
				} `json:"object"`
				Offset int64 `json:"offset"`
				Length int64 `json:"length"`
				Chunks []struct {
					Size     int64  `json:"size"`
					SizeLine string `json:"sizeLine"`
					Offset   int64  `json:"offset"`
					Bytes    int64  `json:"bytes"`
				} `json:"chunks"`
			}
			if err := json.Unmarshal(line, &got); err != nil {
				t.Fatal(err)
			}
			if wantValue := "a" + strings.Repeat("\uFFFD", tc.fffd) + "b"; got.Object.Data["k"] != wantValue {
				t.Errorf("object data k = %q, want %q", got.Object.Data["k"], wantValue)
			}
			if got.Offset != 0 || got.Length != n {
				t.Errorf("offset, length = %d, %d; want 0, %d (bytes on the wire)", got.Offset, got.Length, n)
			}
			if len(got.Chunks) != 1 || got.Chunks[0].Size != n || got.Chunks[0].Bytes != n ||
				got.Chunks[0].SizeLine != fmt.Sprintf("%x", n) || got.Chunks[0].Offset != 0 {
				t.Errorf("chunks = %+v, want one of size and bytes %d (bytes on the wire)", got.Chunks, n)
			}
			if !bytes.Equal(rec.Object, objectBefore) {
				t.Errorf("the record's object was changed: %q", rec.Object)
			}
		})
	}
}

// TestJSONInvalidUTF8Records: the other records that carry bytes from the
// wire are valid UTF-8 too: a listed object (raw JSON, like an event's),
// header values, a problem's detail, the start of an error body.
func TestJSONInvalidUTF8Records(t *testing.T) {
	for _, tc := range invalidUTF8 {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.bytes
			conn := &record.Conn{ID: 1}
			req := &record.Request{Conn: conn, Exchange: 1, Method: "GET", Target: "/api/v1/configmaps?watch=1" + s,
				Proto: "HTTP/1.1", Header: map[string][]string{"User-Agent": {s}}, Watch: true}
			var out bytes.Buffer
			j := NewJSON(&out, Options{})
			for _, r := range []record.Record{
				&record.List{Items: 1, Show: true, Objects: []record.Object{{Kind: "ConfigMap", Name: "cm" + s,
					JSON: json.RawMessage(`{"kind":"ConfigMap","data":{"k":"` + s + `"}}`)}}},
				req,
				&record.Response{Conn: conn, Exchange: 1, Proto: "HTTP/1.1", StatusCode: 500, Reason: s,
					Header: map[string][]string{"X-Bytes": {s}}, Request: req},
				&record.End{Conn: conn, Exchange: 1, How: "close", BodyText: s, Watch: true},
				&record.Problem{Conn: conn, Kind: "watch event does not decode", Detail: s, Offset: -1},
			} {
				j.Emit(r)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(s)
			lines := jsonLines(t, out.Bytes())
			if listed := lines[1]; !bytes.Contains(listed, []byte(`"data":{"k":`+string(want)+`}`)) {
				t.Errorf("listed object line does not hold %s:\n%s", want, listed)
			}
		})
	}
}

// TestAppendValidUTF8: what appendValidUTF8 writes for a JSON string is
// what encoding/json writes for the Go string (for strings encoding/json
// writes without other escapes), and valid text is copied unchanged.
func TestAppendValidUTF8(t *testing.T) {
	for _, tc := range []struct{ name, s, want string }{
		{"ascii", "coredns", `"coredns"`},
		{"valid multi-byte", "café 😀 \uFFFD", "\"café 😀 \uFFFD\""},
		{"lone continuation byte", "a\x80b", `"a\ufffdb"`},
		{"overlong two bytes", "\xc0\xaf", `"\ufffd\ufffd"`},
		{"overlong three bytes", "\xe0\x80\xaf", `"\ufffd\ufffd\ufffd"`},
		{"surrogate", "\xed\xa0\x80", `"\ufffd\ufffd\ufffd"`},
		{"above U+10FFFF", "\xf4\x90\x80\x80", `"\ufffd\ufffd\ufffd\ufffd"`},
		{"cut short at the end", "é\xe2\x82", `"é\ufffd\ufffd"`},
		{"0xff", "\xff\xfe", `"\ufffd\ufffd"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := appendValidUTF8([]byte("x"), []byte(`"`+tc.s+`"`))
			if string(got) != "x"+tc.want {
				t.Errorf("appendValidUTF8(%q) = %s, want %s", tc.s, got[1:], tc.want)
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(tc.s); err != nil {
				t.Fatal(err)
			}
			if std := strings.TrimSuffix(buf.String(), "\n"); std != tc.want {
				t.Errorf("encoding/json writes %s for %q, the test expects %s", std, tc.s, tc.want)
			}
		})
	}
}

// TestValidUTF8WriterAllocs: a valid line is passed on without a copy; a
// line that is not valid reuses the writer's buffer.
func TestValidUTF8WriterAllocs(t *testing.T) {
	for _, line := range []string{
		`{"record":"event","object":{"data":{"k":"café"}}}` + "\n",
		`{"record":"event","object":{"data":{"k":"` + "\xc0\xaf" + `"}}}` + "\n",
	} {
		ew := &errWriter{w: io.Discard}
		v := &validUTF8Writer{w: ew}
		p := []byte(line)
		allocs := testing.AllocsPerRun(100, func() {
			_, _ = v.Write(p)
			_ = ew.Flush()
		})
		if allocs != 0 {
			t.Errorf("Write(%q): %v allocations, want 0", line, allocs)
		}
	}
}

// FuzzValidUTF8: for JSON strings holding any bytes, appendValidUTF8
// writes valid UTF-8 that encoding/json reads as the same string, and
// copies valid text unchanged.
func FuzzValidUTF8(f *testing.F) {
	for _, tc := range invalidUTF8 {
		f.Add(tc.bytes)
	}
	f.Add("café\uFFFD\u2028\xed\xa0\x80\xf4\x90\x80\x80é\xe2\x82")
	f.Fuzz(func(t *testing.T, s string) {
		// A JSON string with s's bytes as they are, but for the ASCII
		// ones JSON requires escaped.
		raw := []byte{'"'}
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
				raw = fmt.Appendf(raw, `\u%04x`, c)
			} else {
				raw = append(raw, c)
			}
		}
		raw = append(raw, '"')
		got := appendValidUTF8(nil, raw)
		if !utf8.Valid(got) {
			t.Fatalf("appendValidUTF8(%q) = %q: not valid UTF-8", raw, got)
		}
		if utf8.Valid(raw) && !bytes.Equal(got, raw) {
			t.Fatalf("appendValidUTF8(%q) = %q: valid text changed", raw, got)
		}
		var before, after string
		if err := json.Unmarshal(raw, &before); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &after); err != nil {
			t.Fatalf("appendValidUTF8(%q) = %q: %v", raw, got, err)
		}
		if before != after {
			t.Fatalf("appendValidUTF8(%q) = %q: reads as %q, want %q", raw, got, after, before)
		}
	})
}
