// Command notls is a Go program without crypto/tls, for pkg/gotls's tests
// of Find's ErrNoCryptoTLS.
package main

import "fmt"

func main() { fmt.Println("no TLS here") }
