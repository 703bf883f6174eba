package cmd

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestStreamDiscoveryRetried: discovery answered 503 (an API server still
// starting, an aggregated API down) is retried with back-off, a retry line
// each, as LIST and WATCH are; the watch then opens.
func TestStreamDiscoveryRetried(t *testing.T) {
	var mu sync.Mutex
	refused := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		mu.Lock()
		if r.URL.Path == "/api" && refused < 2 {
			refused++
			mu.Unlock()
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server is currently unable to handle the request","reason":"ServiceUnavailable","code":503}`)
			return
		}
		mu.Unlock()
		switch {
		case coreDiscovery(w, r, `{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["list","watch"],"shortNames":["cm"]}`):
		case r.URL.Query().Get("watch") != "":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			fmt.Fprint(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}`)
		}
	}))
	defer srv.Close()
	s := startKwatch(t, "stream", "cm", "-n", "default", "--list-mode", "list", "--proxy", srv.URL)
	out := s.waitForText(t, "the watch to open", "< HTTP/1.1 200 OK")
	// client-go's discovery may itself ask /api again within one try:
	// at least one retry line, and both refusals were seen.
	mu.Lock()
	seen := refused
	mu.Unlock()
	if n := strings.Count(out, "Z retry: resolving \"cm\": the server is currently unable to handle the request"); n < 1 || seen != 2 {
		t.Errorf("%d retry lines, %d refusals served; want at least 1 and 2:\n%s", n, seen, out)
	}
	if code := s.stop(t); code != ExitOK {
		t.Errorf("exit %d", code)
	}
}

// TestStreamSiblingFailure: when one of several types fails for good (here
// a LIST answered 400), the others are stopped, and a type whose request
// the server had not answered yet is not reported as failed: the error
// names the type that failed alone.
func TestStreamSiblingFailure(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case coreDiscovery(w, r, `{"name":"configmaps","singularName":"configmap","namespaced":true,"kind":"ConfigMap","verbs":["list","watch"]},`+
			`{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["list","watch"]}`):
		case strings.HasSuffix(r.URL.Path, "/pods"):
			<-r.Context().Done() // never answered
		default:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"bad selector","reason":"BadRequest","code":400}`)
		}
	}))
	defer srv.Close()
	_, errOut, code := run(t, nil, nil, "stream", "configmaps,pods", "-n", "default", "--list-mode", "list", "--proxy", srv.URL)
	if code != ExitProblems {
		t.Errorf("exit %d, want %d", code, ExitProblems)
	}
	if !strings.Contains(errOut, "configmaps: list /api/v1/namespaces/default/configmaps: bad selector") || strings.Contains(errOut, "pods") {
		t.Errorf("stderr:\n%s\nwant the configmaps error alone", errOut)
	}
}

// coreDiscovery answers the discovery request r of a server that serves
// the core group alone, with resources (APIResource objects, comma
// separated) in v1, and reports whether r was one.
func coreDiscovery(w http.ResponseWriter, r *http.Request, resources string) bool {
	switch r.URL.Path {
	case "/api":
		fmt.Fprint(w, `{"kind":"APIVersions","versions":["v1"]}`)
	case "/apis":
		fmt.Fprint(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`)
	case "/api/v1":
		fmt.Fprint(w, `{"kind":"APIResourceList","groupVersion":"v1","resources":[`+resources+`]}`)
	default:
		return false
	}
	return true
}
