package procnet

import "testing"

// FuzzParseTCP: any text, as a /proc/net/tcp{,6} made by another kernel or
// a bad day might be, parses or gives an error, never a panic; whatever
// parses is a socket of a valid address pair.
func FuzzParseTCP(f *testing.F) {
	f.Add([]byte("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1 0000000000000000 100 0 0 10 0\n" +
		"   1: 0100007F:C5A2 0100007F:192B 01 00000000:00000000 02:000A7D00 00000000     0        0 4242 2 0000000000000000 20 4 30 10 -1\n"))
	f.Add([]byte("  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 00000000000000000000000001000000:192B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 99 1 0000000000000000 100 0 0 10 0\n"))
	f.Add([]byte("h\n0: :: : 0A 0 0 0 0 0 1\n"))
	f.Add([]byte("h\n0: 0100007F:FFFFF 0100007F: 1FF 0 0 0 0 0 -1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		socks, err := ParseTCP(b)
		if err != nil {
			return
		}
		for _, s := range socks {
			if !s.Local.IsValid() || !s.Remote.IsValid() || s.State < 0 || s.State > 0xff {
				t.Errorf("parsed %+v", s)
			}
		}
	})
}
