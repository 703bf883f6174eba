// Command kwatch-get makes one HTTPS GET and exits, for kwatch attach's
// end-to-end tests: a process that lives a few milliseconds (a TCP
// connection, a TLS handshake, one request), as kubectl create does. The
// server's certificate is not verified (the tests' servers are
// self-signed); nothing else is configured, so crypto/tls's defaults apply
// (TLS 1.3, ALPN h2 then http/1.1).
//
// stdout: the response's status code and the body's length in bytes,
// "200 12". Exit status 1 when the request fails.
package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kwatch-get URL")
		os.Exit(2)
	}
	c := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		ForceAttemptHTTP2: true,
	}}
	resp, err := c.Get(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(resp.StatusCode, n)
}
