// Command client is a minimal Go watch client for the live benchmarks
// (bench/live.sh): one GET of a watch URL, its body decoded as JSON watch
// events ({"type":…,"object":…} one after another) and counted, the count
// printed when the server ends the body. Over https:// it skips the
// certificate check (bench/replay -tls is self-signed) and speaks HTTP/2
// when the server offers it (net/http's default), or HTTP/1.1 with -http1.
// Being a Go program that links crypto/tls, it is what kwatch attach
// --exe attaches to.
//
// Usage: client [-http1] [-url URL]
//
// It prints "N events (M MODIFIED), PROTO" on stdout and exits 0, or exits
// 1 when the request or the body fails.
package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
)

// watchEvent is the part of an event the client reads: its type; the
// object is decoded as raw bytes only, as a client that keeps it would.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

func main() {
	url := flag.String("url", "https://127.0.0.1:8443/api/v1/namespaces/default/configmaps?watch=1", "watch URL")
	http1 := flag.Bool("http1", false, "HTTP/1.1 over TLS (default: HTTP/2 when the server offers it)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("client: ")

	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		ForceAttemptHTTP2: !*http1,
	}
	if *http1 {
		// A non-nil empty map turns HTTP/2 off (net/http's documented way).
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	resp, err := (&http.Client{Transport: tr}).Get(*url)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		log.Fatalf("%s: %s", *url, resp.Status)
	}
	dec := json.NewDecoder(resp.Body)
	var n, modified int
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			log.Fatalf("after %d events: %v", n, err)
		}
		n++
		if ev.Type == "MODIFIED" {
			modified++
		}
	}
	fmt.Fprintf(os.Stdout, "%d events (%d MODIFIED), %s\n", n, modified, resp.Proto)
}
