package watchclient

import (
	"context"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"
)

// Contexts returns the context names of the kubeconfig that kubectl would
// load (kubeconfig, or $KUBECONFIG and ~/.kube/config when it is empty),
// sorted, for shell completion of --context. It reads no network.
func Contexts(kubeconfig string) ([]string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := rules.Load()
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(cfg.Contexts)), nil
}

// Namespaces lists the cluster's namespace names, sorted, for shell
// completion of --namespace.
func (c *Client) Namespaces(ctx context.Context) ([]string, error) {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, ns := range list.Items {
		names = append(names, ns.Name)
	}
	slices.Sort(names)
	return names, nil
}

// Watchable lists the resources that can be watched, as kubectl names them
// ("configmaps", "deployments.apps"), sorted, for shell completion of
// RESOURCE. Groups the server could not list are left out.
func (c *Client) Watchable(ctx context.Context) ([]string, error) {
	dc, err := c.discovery()
	if err != nil {
		return nil, err
	}
	lists, err := dc.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return nil, err
	}
	var names []string
	for _, l := range lists {
		gv, perr := schema.ParseGroupVersion(l.GroupVersion)
		if perr != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "watch") {
				continue // a subresource, or not watchable
			}
			names = append(names, gv.WithResource(r.Name).GroupResource().String())
		}
	}
	slices.Sort(names)
	return names, nil
}

// Names lists the names of the objects of a resource (an argument as
// Resolve takes it: "cm", "deployments.apps") in namespace ("" for a
// cluster-scoped resource, or the kubeconfig context's namespace when
// namespace is "" and the resource is namespaced), sorted, for shell
// completion of RESOURCE/NAME as kubectl completes it. It lists metadata
// only (PartialObjectMetadata): a Secret's data never comes.
func (c *Client) Names(ctx context.Context, resource, namespace string) ([]string, error) {
	r, err := c.Resolve(ctx, resource)
	if err != nil {
		return nil, err
	}
	mc, err := metadata.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	var list *metav1.PartialObjectMetadataList
	if r.Namespaced {
		if namespace == "" {
			namespace = c.Namespace
		}
		if namespace == "" {
			namespace = "default"
		}
		list, err = mc.Resource(r.GVR).Namespace(namespace).List(ctx, metav1.ListOptions{})
	} else {
		list, err = mc.Resource(r.GVR).List(ctx, metav1.ListOptions{})
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, o := range list.Items {
		names = append(names, o.Name)
	}
	slices.Sort(names)
	return names, nil
}
