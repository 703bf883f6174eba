// Command replay serves one recorded Kubernetes watch event, as fast as it
// can, to measure live decoding: every GET is answered 200 with a chunked
// application/json body of -events copies of the event (one chunk each, as
// kube-apiserver flushes them), ended by the last-chunk. Once a watch has
// been served in full, later requests get 403 Forbidden, so that a client
// that resumes watches (kwatch stream) stops after one replay.
//
// Usage: replay -addr 127.0.0.1:18080 -events 100000
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"strings"
	"sync/atomic"
)

// event is a ConfigMap MODIFIED event of about 1 KB, shaped like those in
// testdata/pcap/watch-lo.pcap.
var event = `{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"coredns","namespace":"kube-system","uid":"ac4b0628-8a4d-462e-953a-444ae21d622f","resourceVersion":"RV","creationTimestamp":"2026-11-29T20:22:16Z","managedFields":[{"manager":"kubectl-create","operation":"Update","apiVersion":"v1","time":"2026-11-29T20:22:16Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:Corefile":{}}}}]},"data":{"Corefile":"` +
	strings.Repeat(`.:53 {\n    errors\n    health\n    ready\n}\n`, 12) + `"}}}` + "\n"

func main() {
	addr := flag.String("addr", "127.0.0.1:18080", "listen address")
	n := flag.Int("events", 100000, "events per watch")
	flag.Parse()
	var served atomic.Bool
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if served.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"replay finished","reason":"Forbidden","code":403}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		f := w.(http.Flusher)
		for i := 0; i < *n; i++ {
			if _, err := w.Write([]byte(strings.Replace(event, "RV", fmt.Sprint(1000+i), 1))); err != nil {
				return
			}
			f.Flush()
		}
		served.Store(true)
	})
	log.Fatal(http.ListenAndServe(*addr, nil))
}
