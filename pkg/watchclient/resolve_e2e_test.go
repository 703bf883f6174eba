package watchclient_test

import (
	"context"
	"strings"
	"testing"

	"github.com/kwatch/kwatch/internal/e2e"
	"github.com/kwatch/kwatch/pkg/record"
	"github.com/kwatch/kwatch/pkg/watchclient"
)

// TestResolve resolves resource arguments through the real API server's
// discovery, as kubectl does: plural names, short names, group-qualified
// names and a CustomResourceDefinition's names, with another user's CRD of
// the plural "widgets" present on the stack.
func TestResolve(t *testing.T) {
	env := e2e.Cluster(t)
	env.CreateForeignCRD(t, "widgets", "Widget")
	crd := env.CreateCRD(t)
	c, err := watchclient.Connect(watchclient.ConnectOptions{ProxyURL: env.ProxyURL}, record.SinkFunc(func(record.Record) {}))
	if err != nil {
		t.Fatal(err)
	}
	own := crd.Group + "/v1 " + crd.Plural + " " + crd.Kind + " namespaced"
	for arg, want := range map[string]string{
		"configmaps":                 "v1 configmaps ConfigMap namespaced",
		"cm":                         "v1 configmaps ConfigMap namespaced",
		"po":                         "v1 pods Pod namespaced",
		"Pods":                       "v1 pods Pod namespaced",
		"deployments.apps":           "apps/v1 deployments Deployment namespaced",
		"deploy":                     "apps/v1 deployments Deployment namespaced",
		"namespaces":                 "v1 namespaces Namespace cluster",
		crd.Plural:                   own,
		crd.Short:                    own,
		crd.Singular:                 own,
		crd.Plural + "." + crd.Group: own,
	} {
		r, err := c.Resolve(context.Background(), arg)
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
