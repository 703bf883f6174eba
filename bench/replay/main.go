// Command replay serves one recorded Kubernetes watch event, as fast as it
// can, to measure live decoding: a watch request (watch=1 or watch=true) is
// answered 200 with a chunked application/json body of -events copies of
// the event, ended by the last-chunk. kube-apiserver writes each event and
// flushes only when no further event is queued for the watch
// (k8s.io/apiserver v0.37.2, pkg/endpoints/handlers/watch.go), so how its
// body is cut into chunks depends on the load: -flush event flushes after
// every event (one chunk each: a server that keeps up with a slow stream),
// -flush drained writes events back to back and flushes once at the end (a
// server with a backlog: net/http cuts the body into 2 KiB chunks that split
// and join events, and sends about 4 KiB per write). Once a watch has been served in full, later watches get 403
// Forbidden, so that a client that resumes watches (kwatch stream, kubectl
// get -w) stops after one replay. It also answers the discovery requests
// (/api, /apis, /api/v1) and the LIST of configmaps that kubectl get -w and
// kwatch stream make before they watch.
//
// -rate N paces the events at N a second (0: as fast as it can), for
// measuring what following a stream of a given rate costs (kwatch pcap -i,
// kwatch attach). -tls serves HTTPS (HTTP/2 or HTTP/1.1 by ALPN) with a
// self-signed certificate made at start, so that a Go client (kubectl
// --insecure-skip-tls-verify) talks TLS to it.
//
// Usage: replay -addr 127.0.0.1:18080 -events 100000 [-flush event|drained] [-rate N] [-tls]
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kwatch/kwatch/internal/testcert"
)

// event is a ConfigMap MODIFIED event of about 1 KB, shaped like those in
// testdata/pcap/watch-lo.pcap.
var event = `{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"coredns","namespace":"kube-system","uid":"ac4b0628-8a4d-462e-953a-444ae21d622f","resourceVersion":"RV","creationTimestamp":"2026-11-29T20:22:16Z","managedFields":[{"manager":"kubectl-create","operation":"Update","apiVersion":"v1","time":"2026-11-29T20:22:16Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:Corefile":{}}}}]},"data":{"Corefile":"` +
	strings.Repeat(`.:53 {\n    errors\n    health\n    ready\n}\n`, 12) + `"}}}` + "\n"

// Discovery documents, enough for client-go's discovery (kubectl get,
// kwatch stream RESOURCE) to resolve configmaps to /api/v1.
const (
	apiVersions  = `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1"}]}`
	apiGroupList = `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`
	coreV1       = `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"v1","resources":[{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"shortNames":["cm"]}]}`
	// emptyList answers the LIST that precedes a watch; the watch starts
	// from its resourceVersion.
	emptyList = `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"999"},"items":[]}`
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18080", "listen address")
	n := flag.Int("events", 100000, "events per watch")
	verbose := flag.Bool("v", false, "log every request")
	flush := flag.String("flush", "event", "when the watch body is flushed: after every event, or once drained (at the end)")
	rate := flag.Int("rate", 0, "events a second (0: as fast as it can)")
	useTLS := flag.Bool("tls", false, "serve HTTPS with a self-signed certificate")
	flag.Parse()
	if *flush != "event" && *flush != "drained" {
		log.Fatalf("-flush %q: want event or drained", *flush)
	}
	var served atomic.Bool
	jsonReply := func(w http.ResponseWriter, code int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if *verbose {
			log.Printf("%s %s", r.Method, r.URL)
		}
		q := r.URL.Query().Get("watch")
		watch := q == "1" || q == "true"
		switch {
		case r.URL.Path == "/api":
			jsonReply(w, http.StatusOK, apiVersions)
			return
		case r.URL.Path == "/apis":
			jsonReply(w, http.StatusOK, apiGroupList)
			return
		case r.URL.Path == "/api/v1":
			jsonReply(w, http.StatusOK, coreV1)
			return
		case !watch && strings.HasSuffix(r.URL.Path, "/configmaps"):
			jsonReply(w, http.StatusOK, emptyList)
			return
		case !watch:
			jsonReply(w, http.StatusNotFound, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"not served by replay","reason":"NotFound","code":404}`)
			return
		case served.Load():
			jsonReply(w, http.StatusForbidden, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"replay finished","reason":"Forbidden","code":403}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		head, tail, _ := strings.Cut(event, "RV")
		buf := make([]byte, 0, len(event)+16)
		start := time.Now()
		for i := 0; i < *n; i++ {
			if *rate > 0 {
				// Event i is due at start + i/rate.
				if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(*rate))); d > 0 {
					time.Sleep(d)
				}
			}
			buf = append(strconv.AppendInt(append(buf[:0], head...), int64(1000+i), 10), tail...)
			if _, err := w.Write(buf); err != nil {
				return
			}
			if *flush == "event" {
				f.Flush()
			}
		}
		f.Flush()
		served.Store(true)
	})
	if *useTLS {
		cert, err := testcert.New(testcert.ECDSA, "replay")
		if err != nil {
			log.Fatal(err)
		}
		srv := &http.Server{Addr: *addr, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
		log.Fatal(srv.ListenAndServeTLS("", ""))
	}
	log.Fatal(http.ListenAndServe(*addr, nil))
}
