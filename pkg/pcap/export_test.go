package pcap

// SetDecodedHook has f called on the decoder's goroutine after each batch
// of ops it decodes, and returns a function that removes it. Not safe to
// use from parallel tests.
func SetDecodedHook(f func()) (remove func()) {
	decodedHook = f
	return func() { decodedHook = nil }
}
