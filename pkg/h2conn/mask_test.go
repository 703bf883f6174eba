package h2conn

import (
	"bytes"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestCredentialMask: a client's header blocks with credentials sent every
// way HPACK allows (Huffman-coded and not, never indexed, indexed and then
// referred to, a name from the dynamic table), in HEADERS with padding and
// priority and in CONTINUATION frames, masked in any split: the masked
// stream decodes (HPACK stays in step) to the same fields with every
// credential value made of '*', and holds no secret.
func TestCredentialMask(t *testing.T) {
	var buf, hb bytes.Buffer
	buf.WriteString(ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	enc := hpack.NewEncoder(&hb)
	_ = fr.WriteSettings()
	block := func(fields ...hpack.HeaderField) []byte {
		hb.Reset()
		for _, f := range fields {
			if err := enc.WriteField(f); err != nil {
				t.Fatal(err)
			}
		}
		return append([]byte(nil), hb.Bytes()...)
	}
	req := func(id uint32, extra ...hpack.HeaderField) []hpack.HeaderField {
		return append([]hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
			{Name: ":path", Value: fmt.Sprintf("/api/v1/configmaps?watch=1&s=%d", id)}, {Name: ":authority", Value: "127.0.0.1:6443"}}, extra...)
	}
	secrets := []string{"Bearer sekrit-token-0123456789abcdef", "session=sekrit-cookie", "sekrit-user", "sekrit-user-2", "Basic c2Vrcml0"}
	// 1: never-indexed Huffman authorization (as Go sends it), an indexed cookie.
	b1 := block(req(1, hpack.HeaderField{Name: "authorization", Value: secrets[0], Sensitive: true},
		hpack.HeaderField{Name: "cookie", Value: secrets[1]}, hpack.HeaderField{Name: "x-remote-user", Value: secrets[2]})...)
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b1, EndStream: true, EndHeaders: true, PadLength: 5,
		Priority: http2.PriorityParam{StreamDep: 0, Weight: 15}})
	// 3: the cookie again (an index into the dynamic table), x-remote-user
	// with another value (its name from the dynamic table), in
	// HEADERS + CONTINUATIONs.
	b3 := block(req(3, hpack.HeaderField{Name: "cookie", Value: secrets[1]}, hpack.HeaderField{Name: "x-remote-user", Value: secrets[3]},
		hpack.HeaderField{Name: "proxy-authorization", Value: secrets[4]})...)
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: b3[:7], EndStream: true})
	_ = fr.WriteContinuation(3, false, b3[7:20])
	_ = fr.WriteContinuation(3, true, b3[20:])
	_ = fr.WriteData(1, false, []byte("authorization: not a header, left alone"))
	wire := buf.Bytes()

	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 50; round++ {
		var m CredentialMask
		var masked []byte
		for p := wire; len(p) > 0; {
			k := 1 + rng.Intn(min(len(p), 40))
			if round == 0 {
				k = len(p)
			}
			masked = append(masked, m.Mask(p[:k])...)
			p = p[k:]
		}
		if len(masked) != len(wire) || m.Broken() {
			t.Fatalf("round %d: %d bytes masked of %d, broken %v", round, len(masked), len(wire), m.Broken())
		}
		// Decode the masked stream as a server would (x/net/http2 reading
		// whole header blocks): HPACK must stay in step.
		rd := http2.NewFramer(nil, bytes.NewReader(masked[len(ClientPreface):]))
		rd.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		var blocks [][]hpack.HeaderField
		for {
			f, err := rd.ReadFrame()
			if err != nil {
				if err.Error() != "EOF" {
					t.Fatalf("round %d: reading the masked stream: %v", round, err)
				}
				break
			}
			if mh, ok := f.(*http2.MetaHeadersFrame); ok {
				blocks = append(blocks, mh.Fields)
			}
		}
		if len(blocks) != 2 {
			t.Fatalf("round %d: %d header blocks", round, len(blocks))
		}
		var got []string
		for _, b := range blocks {
			for _, f := range b {
				got = append(got, f.Name+"="+f.Value)
			}
		}
		// Each credential decodes to asterisks, as many as its value had
		// octets on the wire (fewer than its characters when
		// Huffman-coded); everything else as sent.
		var plain []string
		for _, g := range got {
			name, value, _ := strings.Cut(g, "=")
			if credentialName(name) {
				if value == "" || strings.Trim(value, "*") != "" {
					t.Fatalf("round %d: %s not masked", round, g)
				}
				g = name + "=***"
			}
			plain = append(plain, g)
		}
		want := []string{":method=GET", ":scheme=https", ":path=/api/v1/configmaps?watch=1&s=1", ":authority=127.0.0.1:6443",
			"authorization=***", "cookie=***", "x-remote-user=***",
			":method=GET", ":scheme=https", ":path=/api/v1/configmaps?watch=1&s=3", ":authority=127.0.0.1:6443",
			"cookie=***", "x-remote-user=***", "proxy-authorization=***"}
		if strings.Join(plain, "\n") != strings.Join(want, "\n") {
			t.Fatalf("round %d: decoded\n%s\nwant\n%s", round, strings.Join(plain, "\n"), strings.Join(want, "\n"))
		}
		for _, s := range secrets {
			if bytes.Contains(masked, []byte(s)) || strings.Contains(strings.Join(got, " "), "sekrit") {
				t.Fatalf("round %d: a secret survived", round)
			}
		}
		if !bytes.Contains(masked, []byte("authorization: not a header, left alone")) {
			t.Fatalf("round %d: DATA changed", round)
		}
	}
}

// FuzzCredentialMask: whatever a client sends, masking keeps its length,
// changes nothing but credential values, and does not depend on how the
// bytes are split into writes.
func FuzzCredentialMask(f *testing.F) {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	_ = enc.WriteField(hpack.HeaderField{Name: "authorization", Value: "Bearer t0k3n", Sensitive: true})
	_ = enc.WriteField(hpack.HeaderField{Name: "cookie", Value: "a=b"})
	var buf bytes.Buffer
	buf.WriteString(ClientPreface)
	_ = http2.NewFramer(&buf, nil).WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true, PadLength: 2})
	f.Add(buf.Bytes(), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		var whole CredentialMask
		w := whole.Mask(data)
		var split CredentialMask
		var s []byte
		k := 1 + int(step)
		for p := data; len(p) > 0; {
			n := min(k, len(p))
			s = append(s, split.Mask(p[:n])...)
			p = p[n:]
		}
		if len(w) != len(data) || !bytes.Equal(w, s) {
			t.Fatalf("masked whole and in writes of %d differ (%d, %d, %d bytes)", k, len(data), len(w), len(s))
		}
		for i := range data {
			if w[i] != data[i] && w[i] != '*' && w[i] != huffmanStar {
				t.Fatalf("byte %d changed to %#x", i, w[i])
			}
		}
	})
}
