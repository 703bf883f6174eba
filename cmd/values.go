package cmd

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// byteSize is a flag value in bytes, written as a Kubernetes quantity as
// in resource requests: 67108864, 64Mi, 1Gi, 500k (k8s.io/apimachinery
// resource.Quantity). It must be a whole, positive number of bytes of at
// most max.
type byteSize struct {
	v   *int64
	max int64
}

// newByteSize returns a byteSize flag value writing to *v, set to def.
func newByteSize(v *int64, def, max int64) *byteSize {
	*v = def
	return &byteSize{v: v, max: max}
}

func (b *byteSize) String() string {
	if b == nil || b.v == nil {
		return ""
	}
	return formatBytes(*b.v)
}

func (b *byteSize) Set(s string) error {
	n, err := parseBytes(s, b.max)
	if err != nil {
		return err
	}
	*b.v = n
	return nil
}

// Type names the value in --help ("size").
func (b *byteSize) Type() string { return "size" }

// intSize is a byteSize for options kept in an int (at most 2^31-1).
type intSize struct{ v *int }

// newIntSize returns an intSize flag value writing to *v, set to def.
func newIntSize(v *int, def int) *intSize {
	*v = def
	return &intSize{v: v}
}

func (b *intSize) String() string {
	if b == nil || b.v == nil {
		return ""
	}
	return formatBytes(int64(*b.v))
}

func (b *intSize) Set(s string) error {
	n, err := parseBytes(s, math.MaxInt32)
	if err != nil {
		return err
	}
	*b.v = int(n)
	return nil
}

func (b *intSize) Type() string { return "size" }

// parseBytes reads a size in bytes as a Kubernetes quantity.
func parseBytes(s string, max int64) (int64, error) {
	q, err := resource.ParseQuantity(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("want a size in bytes: a number or a quantity such as 64Mi, 1Gi or 500k")
	}
	n, ok := q.AsInt64()
	if !ok || q.Cmp(*resource.NewQuantity(n, resource.BinarySI)) != 0 {
		return 0, fmt.Errorf("want a whole number of bytes, e.g. 64Mi or 1Gi")
	}
	if n <= 0 {
		return 0, fmt.Errorf("want a positive size, e.g. 64Mi")
	}
	if n > max {
		return 0, fmt.Errorf("at most %s", formatBytes(max))
	}
	return n, nil
}

// formatBytes writes n bytes as the shortest exact binary quantity
// ("64Mi"), or as a plain number.
func formatBytes(n int64) string {
	return resource.NewQuantity(n, resource.BinarySI).String()
}

// durationValue is a time.Duration flag whose parse error says what forms
// it takes.
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 30s, 5m or 1h30m")
	}
	*v.d = d
	return nil
}

// Type names the value in --help ("duration").
func (v durationValue) Type() string { return "duration" }

// portList is a repeatable TCP port flag (--port 6443 --port 8443, or
// --port 6443,8443).
type portList struct{ v *[]uint16 }

func newPortList(v *[]uint16) *portList { return &portList{v} }

func (p *portList) String() string {
	var s []string
	for _, n := range *p.v {
		s = append(s, strconv.Itoa(int(n)))
	}
	return strings.Join(s, ",")
}

func (p *portList) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("a TCP port is 1 to 65535, not %q", f)
		}
		*p.v = append(*p.v, uint16(n))
	}
	return nil
}

func (p *portList) Type() string { return "port" }
