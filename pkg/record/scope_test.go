package record

import "testing"

func TestTargetScope(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		target string
		want   Scope
		ok     bool
	}{
		{"/api/v1/namespaces/demo/configmaps?watch=true&labelSelector=app%3Dweb", Scope{Resource: "configmaps", Namespace: "demo", LabelSelector: "app=web"}, true},
		{"/apis/apps/v1/deployments?allowWatchBookmarks=true&watch=true", Scope{Resource: "deployments.apps"}, true},
		{"/api/v1/watch/namespaces/kube-system/configmaps/coredns?timeoutSeconds=5", Scope{Resource: "configmaps", Namespace: "kube-system", FieldSelector: "metadata.name=coredns"}, true},
		{"/api/v1/namespaces/demo/pods?fieldSelector=spec.nodeName%3Dn1&watch=1", Scope{Resource: "pods", Namespace: "demo", FieldSelector: "spec.nodeName=n1"}, true},
		{"/api/v1/namespaces/demo", Scope{Resource: "namespaces", FieldSelector: "metadata.name=demo"}, true},
		{"/api/v1/namespaces?watch=true", Scope{Resource: "namespaces"}, true},
		{"/apis/example.com/v1/namespaces/x/widgets/w1", Scope{Resource: "widgets.example.com", Namespace: "x", FieldSelector: "metadata.name=w1"}, true},
		{"/api/v1/namespaces/demo/pods/p/log", Scope{}, false},
		{"/api/v1/namespaces/demo/status", Scope{}, false},
		{"/api/v1", Scope{}, false},
		{"/apis/apps/v1", Scope{}, false},
		{"/healthz", Scope{}, false},
		{"%zz", Scope{}, false},
		{"", Scope{}, false},
	} {
		got, ok := TargetScope(tc.target)
		if got != tc.want || ok != tc.ok {
			t.Errorf("TargetScope(%q) = %+v, %v; want %+v, %v", tc.target, got, ok, tc.want, tc.ok)
		}
	}
}
