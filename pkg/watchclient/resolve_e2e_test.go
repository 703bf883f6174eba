package watchclient_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kwatch/kwatch/internal/e2e"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/watchclient"
)

// TestResolve resolves resource arguments through the real API server's
// discovery, as kubectl does: plural names, short names, group-qualified
// names and a CustomResourceDefinition's names.
func TestResolve(t *testing.T) {
	env := e2e.Cluster(t)
	dc, err := dynamic.NewForConfig(env.RESTConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.kwatch.test"},
		"spec": map[string]any{
			"group": "kwatch.test", "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": []any{"wdg"}},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dc.Resource(crdGVR).Create(context.Background(), crd, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	c, err := watchclient.Connect(watchclient.ConnectOptions{ProxyURL: env.ProxyURL}, record.SinkFunc(func(record.Record) {}))
	if err != nil {
		t.Fatal(err)
	}
	for arg, want := range map[string]string{
		"configmaps":       "v1 configmaps ConfigMap namespaced",
		"cm":               "v1 configmaps ConfigMap namespaced",
		"po":               "v1 pods Pod namespaced",
		"Pods":             "v1 pods Pod namespaced",
		"deployments.apps": "apps/v1 deployments Deployment namespaced",
		"deploy":           "apps/v1 deployments Deployment namespaced",
		"namespaces":       "v1 namespaces Namespace cluster",
		"widgets":          "kwatch.test/v1 widgets Widget namespaced",
		"wdg":              "kwatch.test/v1 widgets Widget namespaced",
	} {
		var r watchclient.Resource
		// A new CRD takes a moment to appear in discovery.
		deadline := time.Now().Add(20 * time.Second)
		for {
			r, err = c.Resolve(context.Background(), arg)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("%s: %v", arg, err)
			continue
		}
		scope := "cluster"
		if r.Namespaced {
			scope = "namespaced"
		}
		got := r.GVR.GroupVersion().String() + " " + r.GVR.Resource + " " + r.Kind + " " + scope
		if got != want {
			t.Errorf("%s: %s, want %s", arg, got, want)
		}
	}
	if _, err := c.Resolve(context.Background(), "nosuchthings"); err == nil || !strings.Contains(err.Error(), `doesn't have a resource type "nosuchthings"`) {
		t.Errorf("unknown resource: %v", err)
	}
}
