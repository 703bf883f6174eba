package cmd

import (
	"math"
	"testing"
	"time"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"67108864", 64 << 20, true},
		{"64Mi", 64 << 20, true},
		{"1Gi", 1 << 30, true},
		{"500k", 500000, true},
		{"4Ki", 4096, true},
		{" 1Mi ", 1 << 20, true},
		{"0", 0, false},
		{"-1Mi", 0, false},
		{"1.5", 0, false},
		{"100m", 0, false}, // 0.1 byte
		{"64MB", 0, false},
		{"", 0, false},
		{"3Gi", 0, false}, // above the int32 bound below
	} {
		got, err := parseBytes(tc.in, math.MaxInt32)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if got := formatBytes(64 << 20); got != "64Mi" {
		t.Errorf("formatBytes(64Mi) = %q", got)
	}
	if got := formatBytes(1900); got != "1900" {
		t.Errorf("formatBytes(1900) = %q", got)
	}
}

// TestSizeFlags: the size flags take quantities and show their defaults
// as quantities in --help.
func TestSizeFlags(t *testing.T) {
	c := newPcapCommand(IOStreams{})
	if err := c.Flags().Parse([]string{"--max-event-bytes", "1Gi", "--max-header-bytes", "2Mi", "--gap-timeout", "5s"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"max-event-bytes": "1Gi", "max-header-bytes": "2Mi", "max-trailer-bytes": "64Ki",
		"max-buffered-bytes-total": "256Mi", "gap-timeout": (5 * time.Second).String()} {
		if got := c.Flags().Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %s, want %s", name, got, want)
		}
	}
}
