package node

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestExecFallsBackToSPDY: an API server that refuses the WebSocket
// upgrade (an older one, or RBAC that grants create but not get on
// pods/exec to a WebSocket's GET before Kubernetes 1.35) is asked again
// over SPDY (a POST), as kubectl exec does.
func TestExecFallsBackToSPDY(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"p\" is forbidden: User \"u\" cannot get resource \"pods/exec\"","reason":"Forbidden","code":403}`)
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kwatch", Name: "p"}}
	err = NewExec(cfg, cs)(context.Background(), pod, []string{"kwatch", "version"}, strings.NewReader(""), io.Discard, io.Discard)
	if err == nil {
		t.Fatal("exec refused twice: no error")
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"GET /api/v1/namespaces/kwatch/pods/p/exec", "POST /api/v1/namespaces/kwatch/pods/p/exec"}
	if strings.Join(asked, "\n") != strings.Join(want, "\n") {
		t.Errorf("asked:\n%s\nwant (WebSocket, then SPDY):\n%s\nerror: %v", strings.Join(asked, "\n"), strings.Join(want, "\n"), err)
	}
}
