package pcap

import "github.com/kwatch/kwatch/pkg/record"

// SetDecodedHook has f called on the decoder's goroutine after each batch
// of ops it decodes, and returns a function that removes it. Not safe to
// use from parallel tests.
func SetDecodedHook(f func()) (remove func()) {
	decodedHook = f
	return func() { decodedHook = nil }
}

// SetEmitHook has f called with every record as the decoder makes it, on
// the decoder's goroutine, and returns a function that removes it. Not safe
// to use from parallel tests.
func SetEmitHook(f func(record.Record)) (remove func()) {
	emitHook = f
	return func() { emitHook = nil }
}
