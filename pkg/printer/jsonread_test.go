package printer

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/kwatch/kwatch/internal/testutil"
	"github.com/kwatch/kwatch/pkg/record"
)

// goldenJSONL lists the JSON Lines golden files of the shipped captures
// (pkg/pcap's TestGolden writes them: -o json --all-http --wire), beside
// their pretty golden files (--all-http).
func goldenJSONL(t *testing.T) []string {
	var files []string
	for _, dir := range []string{"../../testdata/pcap", "../../testdata/captures"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.golden.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 50 {
		t.Fatalf("%d golden JSON Lines files: the captures' goldens are missing", len(files))
	}
	return files
}

// readAll reads every record of data with a JSONReader and hands each to
// the printers.
func readAll(t *testing.T, r io.Reader, printers ...Printer) []record.Record {
	t.Helper()
	jr := NewJSONReader(r, ReadOptions{})
	var recs []record.Record
	for {
		rec, err := jr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
		for _, p := range printers {
			p.Emit(rec)
		}
	}
	if jr.Skipped() != 0 {
		t.Errorf("%d lines skipped as of unknown kinds", jr.Skipped())
	}
	for _, p := range printers {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return recs
}

// replacement matches a byte that is not UTF-8 as the JSON writes it
// (\ufffd), and highBytes the escapes the pretty printer writes for bytes
// and characters from 0x80 (Escape): the JSON carries the character U+FFFD
// where the wire had such a byte (RFC 8259 §8.1: JSON text is UTF-8), not
// the byte, so both sides are compared with U+FFFD in their place.
var (
	replacement = regexp.MustCompile(`\\ufffd`)
	highBytes   = regexp.MustCompile(`\\x[89a-f][0-9a-f]`)
)

// TestJSONRoundTrip reads every shipped capture's JSON Lines golden back
// into records and prints them again: as JSON Lines they are the same
// bytes, and the pretty printer prints the pretty golden, line for line
// (the records carry all it shows). Read whole and one byte at a time.
func TestJSONRoundTrip(t *testing.T) {
	for _, file := range goldenJSONL(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".golden.jsonl")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			wantPretty, err := os.ReadFile(strings.TrimSuffix(file, ".jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			for _, oneByte := range []bool{false, true} {
				var src io.Reader = bytes.NewReader(want)
				if oneByte {
					src = iotest.OneByteReader(src)
				}
				var js, pretty bytes.Buffer
				readAll(t, src, NewJSON(&js, Options{AllHTTP: true, Wire: true}), NewPretty(&pretty, Options{AllHTTP: true}))
				if w, g := replacement.ReplaceAll(want, []byte("\uFFFD")), replacement.ReplaceAll(js.Bytes(), []byte("\uFFFD")); !bytes.Equal(w, g) {
					t.Errorf("JSON written again differs from %s:\n%s", file, lineDiff(w, g))
				}
				if w, g := highBytes.ReplaceAll(wantPretty, []byte("\uFFFD")), highBytes.ReplaceAll(pretty.Bytes(), []byte("\uFFFD")); !bytes.Equal(w, g) {
					t.Errorf("pretty output of the records read differs from %s:\n%s", strings.TrimSuffix(file, ".jsonl"), lineDiff(w, g))
				}
			}
		})
	}
}

func lineDiff(want, got []byte) string {
	i, w, g, ok := testutil.FirstDiff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n"))
	if !ok {
		return "(no line differs)"
	}
	clip := func(s string) string {
		if len(s) > 400 {
			return s[:400] + "…"
		}
		return s
	}
	return "line " + strconv.Itoa(i+1) + ":\n  want: " + clip(w) + "\n  got:  " + clip(g)
}

// TestJSONReaderLines: a line that is not a record, a kind this reader
// does not know, a line over the bound and a stream cut inside its last
// line are each said (or counted) and reading goes on; a LIST is returned
// with the objects listed after it.
func TestJSONReaderLines(t *testing.T) {
	in := strings.Join([]string{
		`{"record":"kwatch","time":"2026-01-02T03:04:05.000000001Z","schema":1,"version":"v9","command":"attach","node":"n1"}`,
		`not json`,
		`{"record":"a-kind-of-a-newer-schema","x":1}`,
		`{"record":"list","time":"2026-01-02T03:04:05.000000002Z","resource":"configmaps","items":2,"resourceVersion":"7","durationSeconds":0.5,"reason":"initial","why":"initial"}`,
		`{"record":"listed","time":"2026-01-02T03:04:05.000000002Z","kind":"ConfigMap","name":"a","resourceVersion":"5","object":{"kind":"ConfigMap"}}`,
		`{"record":"listed","time":"2026-01-02T03:04:05.000000002Z","kind":"ConfigMap","name":"b","resourceVersion":"6","object":{}}`,
		`{"record":"connection","id":4,"connection":"10.0.0.1:5 -> 10.0.0.2:6443","client":"10.0.0.1:5","server":"10.0.0.2:6443"}`,
		`{"record":"note","time":"2026-01-02T03:04:06Z","connection":"10.0.0.1:5 -> 10.0.0.2:6443","kind":"h2","message":"m"}`,
		`{"record":"connection","id":4,"connection":"10.0.0.1:5 -> 10.0.0.2:6443","client":"10.0.0.1:5","server":"10.0.0.2:6443","http2":true}`,
		`{"record":"note","time":"2026-01-02T03:04:07Z","connection":"10.0.0.1:5 -> 10.0.0.2:6443","kind":"h2","message":"m2"}`,
		`{"record":"event","type":"ADDED","object":` + strings.Repeat(" ", 200) + `{}}`,
		`{"record":"exit","time":"2026-01-02T03:04:08Z","code":2,"message":"no such process named x","kind":"no-target"}`,
		`{"record":"summary","connections":1,"undecoded":{},"watches":0,"events":{},"chunks":0,"problems":0,"warnings":0,"packets":1`,
	}, "\n")
	jr := NewJSONReader(strings.NewReader(in), ReadOptions{MaxLineBytes: 200, Node: "node-a"})
	var got []string
	for {
		rec, err := jr.Next()
		if err == io.EOF {
			break
		}
		var re *ReadError
		switch {
		case errors.As(err, &re):
			got = append(got, "error "+re.Error())
			continue
		case err != nil:
			t.Fatal(err)
		}
		switch v := rec.(type) {
		case *record.Start:
			got = append(got, "start "+v.Version+" "+v.Command+" "+v.Node+" "+v.Time.Format("15:04:05.000000000"))
		case *record.List:
			s := "list"
			for _, o := range v.Objects {
				s += " " + o.Name + "@" + o.ResourceVersion
			}
			got = append(got, s)
		case *record.ConnNote:
			got = append(got, "note "+v.Message+" #"+strconv.Itoa(v.Conn.ID)+" "+v.Conn.Node+" http2="+strconv.FormatBool(v.Conn.HTTP2))
		case *record.Exit:
			got = append(got, "exit "+strconv.Itoa(v.Code)+" "+string(v.Kind)+": "+v.Message)
		default:
			got = append(got, "?")
		}
	}
	want := []string{
		"start v9 attach n1 03:04:05.000000001",
		"error line 2: invalid character 'o' in literal null (expecting 'u')",
		"list a@5 b@6",
		// A connection said again as HTTP/2 is the same connection,
		// HTTP/2 from then on.
		"note m #4 node-a http2=false",
		"note m2 #4 node-a http2=true",
		"error line 11: line too long: over 200 bytes",
		"exit 2 no-target: no such process named x",
		"error line 13: unexpected EOF",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if jr.Skipped() != 1 {
		t.Errorf("Skipped() = %d, want 1", jr.Skipped())
	}
}

// TestJSONConnectionAgain: a connection that turns out to be HTTP/2 after
// its connection record was written gets its record again, marked http2,
// once (its client named by the first only); the pretty printer says
// nothing more of it.
func TestJSONConnectionAgain(t *testing.T) {
	c := &record.Conn{ID: 3, Client: netip.MustParseAddrPort("10.0.0.1:5"), Server: netip.MustParseAddrPort("10.0.0.2:6443"), Node: "w1"}
	h2 := *c
	h2.HTTP2 = true
	recs := []record.Record{
		&record.ConnNote{Conn: c, Kind: "not-http", Message: "no-syn"},
		&record.ConnNote{Conn: &h2, Kind: "h2-joined", Message: "joined"},
		&record.ConnNote{Conn: &h2, Kind: "h2", Message: "again"},
	}
	var out bytes.Buffer
	j := NewJSON(&out, Options{AllHTTP: true})
	for _, r := range recs {
		j.Emit(r)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	var conns []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if strings.HasPrefix(l, `{"record":"connection"`) {
			conns = append(conns, l)
		}
	}
	want := []string{
		`{"record":"connection","id":3,"connection":"10.0.0.1:5 -> 10.0.0.2:6443","client":"10.0.0.1:5","server":"10.0.0.2:6443","node":"w1","identity":{"text":"node w1","node":"w1"}}`,
		`{"record":"connection","id":3,"connection":"10.0.0.1:5 -> 10.0.0.2:6443","client":"10.0.0.1:5","server":"10.0.0.2:6443","http2":true,"node":"w1"}`,
	}
	if strings.Join(conns, "\n") != strings.Join(want, "\n") {
		t.Errorf("connection records:\n%s\nwant:\n%s", strings.Join(conns, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(out.String(), `"connection":"10.0.0.1:5 -> 10.0.0.2:6443","node":"w1","kind":"h2"`) {
		t.Errorf("a note does not name its node:\n%s", out.String())
	}
}

// FuzzJSONReader: any input reads without a panic, each line a record, an
// error, or nothing; what is read prints.
func FuzzJSONReader(f *testing.F) {
	for _, file := range []string{"../../testdata/pcap/watch-timeout-any.golden.jsonl", "../../testdata/captures/h2c-reset-lo.golden.jsonl", "../../testdata/captures/informer-reset-lo.golden.jsonl"} {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"record":"event","chunks":[{"wire":"zz"}]}` + "\n" + `{"record":"health","chunkSizes":{"x":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		jr := NewJSONReader(bytes.NewReader(data), ReadOptions{MaxLineBytes: 1 << 16})
		p, j := NewPretty(io.Discard, Options{AllHTTP: true, Wire: true}), NewJSON(io.Discard, Options{AllHTTP: true, Wire: true})
		for n := 0; n <= len(data); n++ {
			rec, err := jr.Next()
			if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			if err != nil {
				continue
			}
			p.Emit(rec)
			j.Emit(rec)
		}
		p.Close()
		j.Close()
	})
}

// TestJSONReadIdentity: the clients' identities (an attached server's
// view of a client: its process note, client-go's User-Agent, a watch
// whose request was not seen) are read back from the records they were
// made of, and written again as they were; read as a node's stream, each
// also names the node, on its own line and in its text.
func TestJSONReadIdentity(t *testing.T) {
	var want bytes.Buffer
	j := NewJSON(&want, Options{AllHTTP: true})
	for _, r := range whoRecords() {
		j.Emit(r)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(want.String(), `"identity":{`); n != 4 {
		t.Fatalf("%d identities written, want 4 (the connection, 2 requests, the response whose request was not seen):\n%s", n, want.String())
	}
	var again bytes.Buffer
	readAll(t, bytes.NewReader(want.Bytes()), NewJSON(&again, Options{AllHTTP: true}))
	if !bytes.Equal(want.Bytes(), again.Bytes()) {
		t.Errorf("JSON written again differs:\n%s", lineDiff(want.Bytes(), again.Bytes()))
	}

	jr := NewJSONReader(bytes.NewReader(want.Bytes()), ReadOptions{Node: "127.0.0.2", Unnumbered: true})
	var node, pretty bytes.Buffer
	p := NewJSON(&node, Options{AllHTTP: true})
	pp := NewPretty(&pretty, Options{AllHTTP: true})
	for {
		rec, err := jr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if c := record.ConnOf(rec); c != nil && c.ID == 0 {
			c.ID = 9 // as the merge numbers them
		}
		p.Emit(rec)
		pp.Emit(rec)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pp.Close(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"#9 127.0.0.1:40030 -> 127.0.0.1:6443 · client kube-controller-manager/v1.37.2 (node 127.0.0.2)\n",
		"#9 s3 > GET /apis/apps/v1/replicasets?watch=true HTTP/2.0 · client kube-controller-manager/v1.37.2 … replicaset-controller (pid 812, node 127.0.0.2)\n",
	} {
		if !strings.Contains(pretty.String(), w) {
			t.Errorf("read as node 127.0.0.2's, no line %q in:\n%s", w, pretty.String())
		}
	}
	for _, w := range []string{
		`"http2":true,"node":"127.0.0.2","identity":{"text":"kube-controller-manager/v1.37.2 (pid 812, node 127.0.0.2)","program":"kube-controller-manager","version":"v1.37.2","platform":"linux/amd64","commit":"abc1234","process":{"role":"client","pid":812,"name":"kube-controller-manager","attached":false},"node":"127.0.0.2"}`,
		`"identity":{"text":"kube-controller-manager/v1.37.2 … replicaset-controller (pid 812, node 127.0.0.2)",`,
		`"identity":{"text":"kube-controller-manager (pid 812, node 127.0.0.2)","process":{"role":"client","pid":812,"name":"kube-controller-manager","attached":false},"node":"127.0.0.2"}`,
	} {
		if !strings.Contains(node.String(), w) {
			t.Errorf("read as node 127.0.0.2's, no %s in:\n%s", w, node.String())
		}
	}
}

// TestJSONReadSummary: a summary's every field is read back, what the
// filters left out and a run on nodes' counts among them, and written
// again as it was.
func TestJSONReadSummary(t *testing.T) {
	at := time.Date(2026, 12, 7, 22, 42, 13, 986484000, time.UTC)
	for _, sum := range []*record.Summary{
		{Time: at, Packets: 24, Connections: 2, NoData: 1, Nodes: 2, Versions: 3,
			LeftOut: &record.LeftOut{Connections: 4, Watches: 5, NotKnown: 1, Exchanges: 6, Problems: 7}},
		{Time: at, Live: true, Connections: 1, WatchesRequested: 2, WatchesOpened: 2, Relists: 1, Retries: 3, Bytes: 4096, Duration: 5 * time.Second},
	} {
		var want bytes.Buffer
		j := NewJSON(&want, Options{AllHTTP: true})
		j.Emit(sum)
		if err := j.Close(); err != nil {
			t.Fatal(err)
		}
		var again bytes.Buffer
		recs := readAll(t, bytes.NewReader(want.Bytes()), NewJSON(&again, Options{AllHTTP: true}))
		if !bytes.Equal(want.Bytes(), again.Bytes()) {
			t.Errorf("JSON written again differs:\n%s", lineDiff(want.Bytes(), again.Bytes()))
		}
		if got := recs[0].(*record.Summary); sum.LeftOut != nil && (got.LeftOut == nil || *got.LeftOut != *sum.LeftOut) {
			t.Errorf("leftOut read %+v, want %+v", got.LeftOut, sum.LeftOut)
		}
	}
}
