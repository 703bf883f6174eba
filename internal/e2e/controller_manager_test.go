package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// controllerManager returns the stack's kube-controller-manager, failing t
// if it runs none.
func controllerManager(t *testing.T, env *Env) Process {
	t.Helper()
	p, err := env.ControllerManager()
	if err != nil {
		t.Fatalf("kube-controller-manager: %v%s", err, env.logTails())
	}
	if filepath.Base(p.Exe) != "kube-controller-manager" || !filepath.IsAbs(p.Exe) {
		t.Errorf("ControllerManager().Exe = %q, want an absolute path to kube-controller-manager", p.Exe)
	}
	if got, want := filepath.Dir(p.Log), filepath.Dir(env.ControllerManagerPIDFile()); got != want {
		t.Errorf("ControllerManager().Log = %q, want a file in %s", p.Log, want)
	}
	return p
}

// pollUntil calls done every 200 ms until it returns true or ctx ends; it
// reports whether done returned true.
func pollUntil(ctx context.Context, done func() bool) bool {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// TestNamespaceControllerDeletesNamespace: the stack runs kube-controller-
// manager, and its namespace controller does what it does in a cluster. A
// deleted namespace that still holds a ConfigMap is emptied and finalized
// until reading it answers NotFound. Without the controller it would stay
// Terminating for ever, held by its "kubernetes" finalizer.
func TestNamespaceControllerDeletesNamespace(t *testing.T) {
	env := Cluster(t)
	p := controllerManager(t, env)
	t.Logf("kube-controller-manager: pid %d, %s", p.PID, p.Exe)
	cs := env.Clientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	namespaces := cs.CoreV1().Namespaces()

	name := Unique("e2e-nsdelete-")
	ns, err := namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{"kwatch.test/e2e": "true"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	// If the test fails before deleting it, do not leave it behind.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := namespaces.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", name, err)
		}
	})
	if !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
		t.Fatalf("new namespace %s has finalizers %v, want %q among them", name, ns.Spec.Finalizers, corev1.FinalizerKubernetes)
	}
	cm, err := cs.CoreV1().ConfigMaps(name).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "content"},
		Data:       map[string]string{"held": "by the namespace"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating configmap %s/content: %v", name, err)
	}

	// Preconditions: only the deleted namespace's own uid may be finalized.
	if err := namespaces.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ns.UID}}); err != nil {
		t.Fatalf("deleting namespace %s: %v", name, err)
	}
	var last *corev1.Namespace
	var lastErr error
	gone := pollUntil(ctx, func() bool {
		cur, err := namespaces.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true
		case err != nil:
			lastErr = err
		case cur.UID != ns.UID:
			t.Fatalf("namespace %s has uid %s, want %s: someone made another one", name, cur.UID, ns.UID)
		default:
			last, lastErr = cur, nil
		}
		return false
	})
	if !gone {
		switch {
		case last != nil:
			t.Fatalf("namespace %s still exists when the deadline passed: phase %s, finalizers %v, conditions %+v; is the namespace controller running? (log: %s)",
				name, last.Status.Phase, last.Spec.Finalizers, last.Status.Conditions, p.Log)
		default:
			t.Fatalf("namespace %s: no NotFound before the deadline; last error: %v", name, lastErr)
		}
	}
	if last != nil && last.Status.Phase != corev1.NamespaceTerminating {
		t.Errorf("namespace %s was %s while it was being deleted, want %s", name, last.Status.Phase, corev1.NamespaceTerminating)
	}
	// The controller deleted the ConfigMap before it finalized the namespace.
	if _, err := cs.CoreV1().ConfigMaps(name).Get(ctx, cm.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("configmap %s/%s after its namespace is gone: err = %v, want NotFound", name, cm.Name, err)
	}
}

// TestGarbageCollectorDeletesDependents: kube-controller-manager's garbage
// collector runs. A ConfigMap whose ownerReference names another ConfigMap
// is deleted once its owner is (background propagation).
func TestGarbageCollectorDeletesDependents(t *testing.T) {
	env := Cluster(t)
	controllerManager(t, env)
	cs := env.Clientset(t)
	ns := env.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cms := cs.CoreV1().ConfigMaps(ns)

	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating configmap %s/owner: %v", ns, err)
	}
	dependent, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "dependent",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID,
		}},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating configmap %s/dependent: %v", ns, err)
	}
	if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &owner.UID}}); err != nil {
		t.Fatalf("deleting configmap %s/owner: %v", ns, err)
	}
	var lastUID types.UID
	var lastErr error
	gone := pollUntil(ctx, func() bool {
		cur, err := cms.Get(ctx, dependent.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true
		}
		if err == nil {
			lastUID, lastErr = cur.UID, nil
		} else {
			lastErr = err
		}
		return false
	})
	if !gone {
		t.Fatalf("configmap %s/dependent (uid %s, owner deleted) still there when the deadline passed (last error: %v); is the garbage collector running?",
			ns, lastUID, lastErr)
	}
}
