package pcap

import (
	"bytes"
	"encoding/binary"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/kwatch/kwatch/pkg/keylog"
)

// block returns a little-endian pcapng block of type typ around body
// (padded to 4 bytes), with both total lengths (draft-ietf-opsawg-pcapng
// §3.1); total, when not 0, is written instead of the true length.
func block(typ uint32, body []byte, total uint32) []byte {
	for len(body)%4 != 0 {
		body = append(body, 0)
	}
	n := uint32(12 + len(body))
	if total != 0 {
		n = total
	}
	b := binary.LittleEndian.AppendUint32(nil, typ)
	b = binary.LittleEndian.AppendUint32(b, n)
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, n)
}

// dsb returns a Decryption Secrets Block body: TLS key log secrets of
// length n (the true length when n < 0).
func dsb(secrets string, n int) []byte {
	if n < 0 {
		n = len(secrets)
	}
	b := binary.LittleEndian.AppendUint32(nil, secretsTLSKeyLog)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	return append(b, secrets...)
}

// TestSecretsTap: the key logs of Decryption Secrets Blocks are read
// wherever they are, in reads of any size; a block whose secrets length
// exceeds it is reported with its file offset and counts as a key log
// given; other secrets types are left alone.
func TestSecretsTap(t *testing.T) {
	shb := block(blockSectionHeader, []byte{0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0)
	idb := block(1, []byte{1, 0, 0, 0, 0, 0, 4, 0}, 0)
	line := "CLIENT_RANDOM " + strings.Repeat("ab", 32) + " " + strings.Repeat("cd", 48) + "\n"
	ssh := binary.LittleEndian.AppendUint32(nil, 0x5353484b)
	ssh = binary.LittleEndian.AppendUint32(ssh, 3)
	file := bytes.Join([][]byte{shb, idb, block(blockDecryptionSecret, dsb(line, -1), 0),
		block(blockDecryptionSecret, append(ssh, "abc"...), 0),
		block(blockDecryptionSecret, dsb("x", 1000), 0)}, nil)
	damaged := len(file) - len(block(blockDecryptionSecret, dsb("x", 1000), 0))
	for _, oneByte := range []bool{false, true} {
		keys := keylog.New()
		var r io.Reader = bytes.NewReader(file)
		if oneByte {
			r = iotest.OneByteReader(r)
		}
		tap := &secretsTap{r: r, keys: keys}
		if _, err := io.Copy(io.Discard, tap); err != nil {
			t.Fatal(err)
		}
		var random keylog.Random
		for i := range random {
			random[i] = 0xab
		}
		if s, ok := keys.Lookup(random); !ok || len(s.Master) != 48 || s.Source != "pcapng Decryption Secrets Block 1" {
			t.Errorf("one byte at a time %v: %+v %v", oneByte, s, ok)
		}
		want := "Decryption Secrets Block 3 (at byte " + strconv.Itoa(damaged) + " of the file) says 1000 bytes of secrets but holds 4"
		if len(tap.problems) != 1 || tap.problems[0] != want {
			t.Errorf("problems %q\nwant %q", tap.problems, want)
		}
	}
}
