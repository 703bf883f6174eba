package h2conn

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"golang.org/x/net/http2/hpack"

	"github.com/kwatch/kwatch/pkg/record"
)

// joinedField is one field as joinedHPACK gave it: known (f) or not (u).
type joinedField struct {
	f     hpack.HeaderField
	u     record.UnknownField
	known bool
}

func decodeJoined(t testing.TB, d *joinedHPACK, block []byte) ([]joinedField, error) {
	t.Helper()
	var out []joinedField
	err := d.decode(block, func(f hpack.HeaderField) {
		out = append(out, joinedField{f: f, known: true})
	}, func(u record.UnknownField) {
		if u.Position != len(out) {
			t.Fatalf("unknown field at position %d, after %d fields", u.Position, len(out))
		}
		out = append(out, joinedField{u: u})
	})
	return out, err
}

// blocks encodes header lists as one HTTP/2 client's encoder would: each
// list a block, repeated fields indexed in the dynamic table.
func blocks(t testing.TB, lists [][]hpack.HeaderField, update func(i int, e *hpack.Encoder)) [][]byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	var out [][]byte
	for i, l := range lists {
		buf.Reset()
		if update != nil {
			update(i, enc)
		}
		for _, f := range l {
			if err := enc.WriteField(f); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, bytes.Clone(buf.Bytes()))
	}
	return out
}

func request(n int, sensitive bool) []hpack.HeaderField {
	return []hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "127.0.0.1:6443"},
		{Name: ":path", Value: fmt.Sprintf("/api/v1/namespaces/ns%d/configmaps?watch=1", n%3)},
		{Name: "authorization", Value: "Bearer secret-token", Sensitive: sensitive},
		{Name: "user-agent", Value: "kube-controller-manager/v1.37.2"},
		{Name: "accept", Value: "application/vnd.kubernetes.protobuf, */*"},
		{Name: "x-request", Value: fmt.Sprint(n)},
	}
}

// TestJoinedHPACKFromTheStart: with nothing before the join, every field
// decodes as x/net's Decoder decodes it.
func TestJoinedHPACKFromTheStart(t *testing.T) {
	var lists [][]hpack.HeaderField
	for i := range 20 {
		lists = append(lists, request(i, i%2 == 0))
	}
	xd := hpack.NewDecoder(4096, nil)
	jd := newJoinedHPACK(1 << 20)
	for i, b := range blocks(t, lists, nil) {
		want, err := xd.DecodeFull(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeJoined(t, jd, b)
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		if len(got) != len(want) {
			t.Fatalf("block %d: %d fields, want %d", i, len(got), len(want))
		}
		for k := range want {
			if !got[k].known || got[k].f != want[k] {
				t.Fatalf("block %d field %d: %+v, want %+v", i, k, got[k], want[k])
			}
		}
	}
}

// TestJoinedHPACKJoin: joined after any number of blocks of a connection,
// each field is decoded as x/net's Decoder decodes it from the start, or
// said to be unknown; unknown only when it refers to an index past the
// entries added since the join, and its value length told when it was a
// literal.
func TestJoinedHPACKJoin(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	var lists [][]hpack.HeaderField
	for range 60 {
		l := request(rnd.IntN(5), rnd.IntN(4) == 0)
		rnd.Shuffle(len(l)-1, func(a, b int) { l[a+1], l[b+1] = l[b+1], l[a+1] })
		lists = append(lists, l[:4+rnd.IntN(len(l)-3)])
	}
	// The encoder shrinks and grows its table now and then (RFC 7541
	// §6.3), as after a SETTINGS_HEADER_TABLE_SIZE change.
	bs := blocks(t, lists, func(i int, e *hpack.Encoder) {
		switch i % 17 {
		case 9:
			e.SetMaxDynamicTableSize(256)
		case 12:
			e.SetMaxDynamicTableSize(4096)
		}
	})
	withUnknown := 0
	for join := 0; join < len(bs); join++ {
		xd := hpack.NewDecoder(4096, nil)
		jd := newJoinedHPACK(1 << 20)
		added := 0 // entries added since the join, at most
		unknown := 0
		for i, b := range bs {
			want, err := xd.DecodeFull(b)
			if err != nil {
				t.Fatal(err)
			}
			if i < join {
				continue
			}
			got, err := decodeJoined(t, jd, b)
			if err != nil {
				t.Fatalf("join %d block %d: %v", join, i, err)
			}
			if len(got) != len(want) {
				t.Fatalf("join %d block %d: %d fields, want %d", join, i, len(got), len(want))
			}
			for k, g := range got {
				switch {
				case g.known && g.f != want[k]:
					t.Fatalf("join %d block %d field %d: %+v, want %+v (a guess)", join, i, k, g.f, want[k])
				case !g.known && g.u.ValueBytes < 0 && g.u.Index <= uint64(len(staticTable)+added):
					// (An entry added since the join whose name came
					// from before it is unknown with its value's length.)
					t.Fatalf("join %d block %d field %d: index %d said unknown with %d entries added since the join", join, i, k, g.u.Index, added)
				case !g.known && g.u.ValueBytes >= 0 && g.u.ValueBytes != len(want[k].Value):
					t.Fatalf("join %d block %d field %d: value of %d bytes, want %d", join, i, k, g.u.ValueBytes, len(want[k].Value))
				case !g.known:
					unknown++
				}
			}
			added = len(jd.table)
		}
		if unknown > 0 {
			withUnknown++
		}
	}
	// Joins right after the encoder shrank its table see none.
	if withUnknown < len(bs)/2 {
		t.Errorf("only %d of %d joins had a field unknown", withUnknown, len(bs))
	}
}

// TestJoinedHPACKCases: named representations (RFC 7541 §6, Appendix C).
func TestJoinedHPACKCases(t *testing.T) {
	lit := func(b byte, name, value string) []byte { // a literal with a literal name
		return append(append([]byte{b, byte(len(name))}, name...), append([]byte{byte(len(value))}, value...)...)
	}
	huff := func(s string) []byte {
		h := hpack.AppendHuffmanString(nil, s)
		return append([]byte{0x80 | byte(len(h))}, h...)
	}
	for _, tc := range []struct {
		name  string
		block []byte
		want  string
		err   bool
	}{
		{"static indexed", []byte{0x82, 0x87}, ":method=GET :scheme=https", false},
		{"indexed, before the join", []byte{0xbe, 0x82}, "?62 :method=GET", false},
		{"literal with indexing, then it", append(lit(0x40, "x-a", "1"), 0xbe, 0xbf), "x-a=1 x-a=1 ?63", false},
		{"literal, name before the join", append([]byte{0x7f, 0x00}, 3, 'a', 'b', 'c'), "?63(3)", false},
		{"indexed name from before, then the entry it made", append(append([]byte{0x7f, 0x01}, 2, 'v', 'w'), 0xbe), "?64(2) ?62(2)", false},
		{"without indexing", append(lit(0x00, "x-b", "2"), 0xbe), "x-b=2 ?62", false},
		{"never indexed", append(lit(0x10, "authorization", "t"), 0xbe), "authorization=t(sensitive) ?62", false},
		{"huffman", append(append([]byte{0x40}, huff("x-c")...), huff("hello")...), "x-c=hello", false},
		{"size update to 0 empties the table", append(append(lit(0x40, "x-a", "1"), 0x20), 0xbe), "x-a=1 ?62", false},
		{"index 0", []byte{0x80}, "", true},
		{"integer too long", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, "", true},
		{"cut short", []byte{0x40, 0x05, 'x'}, "", true},
		{"bad huffman", []byte{0x40, 0x81, 0x00, 0x01, 'v'}, "", true},
	} {
		d := newJoinedHPACK(1 << 10)
		got, err := decodeJoined(t, d, tc.block)
		var parts []string
		for _, g := range got {
			switch {
			case g.known && g.f.Sensitive:
				parts = append(parts, g.f.Name+"="+g.f.Value+"(sensitive)")
			case g.known:
				parts = append(parts, g.f.Name+"="+g.f.Value)
			case g.u.ValueBytes >= 0:
				parts = append(parts, fmt.Sprintf("?%d(%d)", g.u.Index, g.u.ValueBytes))
			default:
				parts = append(parts, fmt.Sprintf("?%d", g.u.Index))
			}
		}
		if s := fmt.Sprint(parts); (err != nil) != tc.err || !tc.err && s != "["+tc.want+"]" {
			t.Errorf("%s: %s, err %v; want [%s], err %v", tc.name, s, err, tc.want, tc.err)
		}
		if err != nil && len(d.table) != 0 {
			t.Errorf("%s: after an error %d entries are still known", tc.name, len(d.table))
		}
	}
	// A string past the bound is refused, not held.
	d := newJoinedHPACK(4)
	if _, err := decodeJoined(t, d, lit(0x40, "x-long", "v")); err == nil {
		t.Error("a 6-byte name with a bound of 4: no error")
	}
}

// TestStaticTable: the static table is RFC 7541 Appendix A's.
func TestStaticTable(t *testing.T) {
	for i, want := range map[int]hpack.HeaderField{1: {Name: ":authority"}, 2: {Name: ":method", Value: "GET"},
		8: {Name: ":status", Value: "200"}, 31: {Name: "content-type"}, 61: {Name: "www-authenticate"}} {
		if got := staticTable[i-1]; got != want {
			t.Errorf("static %d: %+v, want %+v", i, got, want)
		}
	}
	for i, n := range staticNames {
		if staticTable[i].Name != n {
			t.Errorf("static %d: %q, the credential mask's table says %q", i+1, staticTable[i].Name, n)
		}
	}
}
