package testutil

// FirstDiff finds the first index where the lines a and b differ; a line
// present in one slice and missing from the other differs from it, even
// when it is empty. It returns the index and the two lines ("" for a
// missing one), and ok=false when the slices are equal.
func FirstDiff(a, b []string) (i int, x, y string, ok bool) {
	for i = 0; i < len(a) || i < len(b); i++ {
		if i >= len(a) || i >= len(b) {
			x, y = "", ""
			if i < len(a) {
				x = a[i]
			}
			if i < len(b) {
				y = b[i]
			}
			return i, x, y, true
		}
		if a[i] != b[i] {
			return i, a[i], b[i], true
		}
	}
	return 0, "", "", false
}
