package live

import (
	"testing"
	"time"
)

// TestMergeClose closes the captures of a Merge while its goroutines read
// them, as kwatch attach does at its end: nothing may touch a ring after
// Close unmapped it.
func TestMergeClose(t *testing.T) {
	needRoot(t)
	for i := 0; i < 8; i++ {
		var caps []*Capture
		for range 2 {
			c, err := Open(Options{Interface: "lo", Poll: 5 * time.Millisecond, RingBytes: 4 << 20})
			if err != nil {
				t.Fatal(err)
			}
			caps = append(caps, c)
		}
		m := Merge(caps...)
		for range 3 {
			if _, _, _, err := m.ReadPacket(); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range caps {
			c.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
}
