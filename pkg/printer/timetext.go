package printer

import (
	"strings"
	"time"
)

// timeText formats times in one layout, keeping the text of the last
// second: events come many to a second, and time.Format costs more than
// the rest of an event's line but its object. Its layout is a date and
// time to the second, a dot, six or nine zeros, then "Z07:00" or nothing
// (the times are formatted in UTC or in the local zone).
type timeText struct {
	layout string
	local  bool
	dot    int // index of the dot in layout
	digits int // 6 or 9
	suffix string
	sec    int64  // the Unix second of prefix
	prefix string // layout's text up to and with the dot for sec; "" at first
}

// newTimeText returns a timeText for layout (see timeText), in the local
// zone when local, else in UTC.
func newTimeText(layout string, local bool) timeText {
	dot := strings.LastIndexByte(layout, '.')
	digits := len(layout[dot+1:]) - len(strings.TrimLeft(layout[dot+1:], "0"))
	suffix := ""
	if strings.HasSuffix(layout, "Z07:00") {
		suffix = "Z" // of UTC
	}
	return timeText{layout: layout, local: local, dot: dot, digits: digits, suffix: suffix}
}

// format returns t.UTC().Format(layout), or t.Local().Format(layout).
func (c *timeText) format(t time.Time) string {
	if c.local {
		t = t.Local()
	} else {
		t = t.UTC()
	}
	if sec := t.Unix(); sec != c.sec || c.prefix == "" {
		c.sec, c.prefix = sec, t.Format(c.layout[:c.dot+1])
	}
	_, offset := t.Zone()
	if len(c.prefix) != c.dot+1 || (c.suffix != "" && offset != 0) {
		return t.Format(c.layout) // a year past 9999 or before 0
	}
	var b [64]byte
	n := copy(b[:], c.prefix)
	frac := t.Nanosecond()
	for range 9 - c.digits {
		frac /= 10
	}
	for i := n + c.digits - 1; i >= n; i-- {
		b[i] = byte('0' + frac%10)
		frac /= 10
	}
	n += c.digits
	n += copy(b[n:], c.suffix)
	return string(b[:n])
}
