package inflate

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"strings"
	"testing"
)

// rec records what an Inflater reports, as text.
type rec struct {
	out      bytes.Buffer
	carriers []int // carriers of the Inflated calls, without repeats
	spans    [][]Span
	log      []string
}

func (r *rec) Inflated(p []byte, from []Span) {
	r.out.Write(p)
	r.spans = append(r.spans, append([]Span(nil), from...))
	for _, sp := range from {
		if n := len(r.carriers); n == 0 || r.carriers[n-1] != sp.Carrier {
			r.carriers = append(r.carriers, sp.Carrier)
		}
	}
}
func (r *rec) Member(m Member) {
	r.log = append(r.log, fmt.Sprintf("member %d at %d: %d -> %d", m.N, m.Offset, m.In, m.Out))
}
func (r *rec) Problem(kind, detail string, off int64) {
	r.log = append(r.log, fmt.Sprintf("%s at %d: %s", kind, off, detail))
}

func gz(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	return b.Bytes()
}

// feed writes data to a new Inflater in pieces of step bytes (carrier =
// piece number) and closes it.
func feed(coding string, data []byte, step int, max int64) *rec {
	r := &rec{}
	z := New(coding, r, max)
	for i, k := 0, 0; i < len(data); i, k = i+step, k+1 {
		z.Write(data[i:min(i+step, len(data))], k)
	}
	z.Close()
	return r
}

func TestMembers(t *testing.T) {
	ev1 := `{"type":"ADDED","object":{"kind":"ConfigMap"}}` + "\n"
	ev2 := strings.Repeat(`{"type":"MODIFIED","object":{"kind":"ConfigMap","data":{"k":"v"}}}`+"\n", 50)
	m1, m2 := gz(t, ev1), gz(t, ev2)
	body := append(append([]byte{}, m1...), m2...)
	want := []string{
		fmt.Sprintf("member 1 at 0: %d -> %d", len(m1), len(ev1)),
		fmt.Sprintf("member 2 at %d: %d -> %d", len(m1), len(m2), len(ev2)),
	}
	for _, step := range []int{len(body), len(m1), 7, 1} {
		r := feed("gzip", body, step, 0)
		if r.out.String() != ev1+ev2 || strings.Join(r.log, "; ") != strings.Join(want, "; ") {
			t.Errorf("step %d: out %q, log %q", step, r.out.String(), r.log)
		}
	}
	// One member per piece: each member's bytes are attributed to the
	// piece that carried it.
	r := &rec{}
	z := New("gzip", r, 0)
	z.Write(m1, 10)
	if r.out.String() != ev1 {
		t.Errorf("after the first member's piece: %q, want it inflated at once", r.out.String())
	}
	z.Write(m2, 11)
	z.Close()
	// Each member's output comes from its own piece only: the first
	// member's trailer (8 bytes) produced nothing.
	if fmt.Sprint(r.carriers) != "[10 11]" || len(r.spans) != 2 || len(r.spans[1]) != 1 {
		t.Errorf("carriers %v, spans %v; want [10 11], the second output from the second piece only", r.carriers, r.spans)
	}
}

func TestDeflate(t *testing.T) {
	var b bytes.Buffer
	w := zlib.NewWriter(&b)
	w.Write([]byte("hello, deflate"))
	w.Close()
	for _, step := range []int{b.Len(), 1} {
		r := feed("deflate", b.Bytes(), step, 0)
		if r.out.String() != "hello, deflate" || len(r.log) != 1 || !strings.HasPrefix(r.log[0], "member 1 at 0") {
			t.Errorf("step %d: %q %q", step, r.out.String(), r.log)
		}
	}
}

func TestDamage(t *testing.T) {
	ev := strings.Repeat(`{"type":"ADDED","object":{}}`+"\n", 20)
	m := gz(t, ev)
	corrupt := append([]byte{}, m...)
	corrupt[len(corrupt)-6] ^= 0xff // the CRC-32
	badData := append([]byte{}, m...)
	badData[12] = 0xff // inside the deflate data
	for _, tc := range []struct {
		name string
		body []byte
		want string // the log, with the inflated output's length
	}{
		{"crc", cat(m, corrupt, m), fmt.Sprintf("member 1 at 0: %d -> %d; %s at %d: gzip member 2: checksum mismatch (CRC-32 or length) after %d compressed bytes (%d inflated); looking for the next member; member 3 at %d: %d -> %d",
			len(m), len(ev), KindCorrupt, 2*len(m), len(m), len(ev), 2*len(m), len(m), len(ev))},
		{"cut", cat(m, m[:20]), fmt.Sprintf("member 1 at 0: %d -> %d; %s at %d: gzip member 2: the body ended after 20 compressed bytes of it", len(m), len(ev), KindCut, len(m))},
		{"junk", cat([]byte("xyz"), m), fmt.Sprintf("%s at 0: 3 bytes that do not start a gzip member; member 1 at 3: %d -> %d", KindJunk, len(m), len(ev))},
		{"bad data", cat(badData, m), "member 2 at " + fmt.Sprint(len(m))},
	} {
		for _, step := range []int{len(tc.body), 1} {
			r := feed("gzip", tc.body, step, 0)
			got := strings.Join(r.log, "; ")
			if !strings.Contains(got, tc.want) {
				t.Errorf("%s, step %d: log %q\nwant it to contain %q", tc.name, step, got, tc.want)
			}
		}
	}
}

func TestBomb(t *testing.T) {
	bomb := gz(t, strings.Repeat("\x00", 10<<20)) // 10 MiB of zeros: about 10 KiB
	ok := gz(t, "after")
	r := feed("gzip", cat(bomb, ok), 4096, 1<<20)
	if r.out.Len() != 1<<20+len("after") || !strings.HasSuffix(r.out.String(), "after") {
		t.Errorf("inflated %d bytes, want the first 1 MiB of the bomb, then the next member", r.out.Len())
	}
	if len(r.log) != 2 || !strings.HasPrefix(r.log[0], KindBomb+" at 0: gzip member 1 inflates past 1048576 bytes") ||
		!strings.HasPrefix(r.log[1], "member 2 at") {
		t.Errorf("log %q", r.log)
	}
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func FuzzInflate(f *testing.F) {
	m := gz(f, `{"type":"ADDED","object":{"kind":"ConfigMap","metadata":{"name":"a"}}}`+"\n")
	f.Add(cat(m, m), uint8(7))
	f.Add(cat(m[:10], m), uint8(1))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		s := int(step)%64 + 1
		whole := feed("gzip", data, len(data)+1, 1<<20)
		split := feed("gzip", data, s, 1<<20)
		if !bytes.Equal(whole.out.Bytes(), split.out.Bytes()) || strings.Join(whole.log, "\n") != strings.Join(split.log, "\n") {
			t.Fatalf("output depends on how the input is split:\n%q\n%q", whole.log, split.log)
		}
		if whole.out.Len() > 2<<20+len(data) {
			t.Fatalf("inflated %d bytes past the bound", whole.out.Len())
		}
	})
}

type countSink struct{ n int64 }

func (c *countSink) Inflated(p []byte, _ []Span)  { c.n += int64(len(p)) }
func (c *countSink) Member(Member)                {}
func (c *countSink) Problem(_, _ string, _ int64) {}

// BenchmarkWatchMembers inflates a watch as the API server gzips it: one
// member per event (about 800 bytes of JSON), each written as one chunk.
func BenchmarkWatchMembers(b *testing.B) {
	var members [][]byte
	var plain int64
	for i := range 2000 {
		ev := fmt.Sprintf(`{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-%d","namespace":"default","uid":"8251f5df-478e-4d0f-a247-18f2aab0fe6c","resourceVersion":"%d","managedFields":[{"manager":"kubectl-create","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:k":{}}}}]},"data":{"k":"value-%d"}}}`+"\n", i, 1000+i, i*7)
		plain += int64(len(ev))
		members = append(members, gz(b, ev))
	}
	b.SetBytes(plain)
	b.ReportAllocs()
	for b.Loop() {
		var c countSink
		z := New("gzip", &c, 0)
		for i, m := range members {
			z.Write(m, i)
		}
		z.Close()
		if c.n != plain {
			b.Fatalf("inflated %d, want %d", c.n, plain)
		}
	}
}

// TestGapBetweenMembers: bytes lost with the start of a member leave the
// rest of that member, which is part of the loss (the caller reports it),
// not bytes between members; the member after it inflates.
func TestGapBetweenMembers(t *testing.T) {
	ev := strings.Repeat(`{"type":"ADDED","object":{}}`+"\n", 20)
	m := gz(t, ev)
	for _, lost := range []int{1, 10, len(m) - 1} {
		r := &rec{}
		z := New("gzip", r, 0)
		z.Write(m, 0)
		z.Gap(int64(lost))
		z.Write(m[lost:], 1) // the rest of the second member
		z.Write(m, 2)
		z.Close()
		want := fmt.Sprintf("member 1 at 0: %d -> %d; member 2 at %d: %d -> %d", len(m), len(ev), 2*len(m), len(m), len(ev))
		if got := strings.Join(r.log, "; "); got != want {
			t.Errorf("%d bytes lost: log %q\nwant %q", lost, got, want)
		}
	}
}
