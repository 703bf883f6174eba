package node

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The labels every pod kwatch runs on a node carries (Kubernetes's
// recommended labels, app.kubernetes.io/*): kwatch node clean, and each
// run, find the pods an earlier kwatch left by them.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelInstance names the run that made the pod (Spec.Run).
	LabelInstance = "app.kubernetes.io/instance"
	// LabelEnforce is PodSecurity admission's label of a namespace: the
	// level it enforces (Pod Security Standards: privileged, baseline,
	// restricted).
	LabelEnforce = "pod-security.kubernetes.io/enforce"
)

// Selector selects the pods kwatch runs on nodes, of every run.
const Selector = LabelManagedBy + "=kwatch," + LabelComponent + "=node-agent"

// DefaultNamespace is the namespace kwatch's pods run in unless told
// another (--pod-namespace): kwatch's own, labelled to enforce the
// PodSecurity level privileged, made when missing.
const DefaultNamespace = "kwatch"

// ContainerName is the name of the one container of kwatch's pods.
const ContainerName = "kwatch"

// Profile is what kwatch's pod may do on its node: the host namespaces it
// joins and its container's privileges. Profiles are data: PodSpec reads
// them and branches on none.
type Profile struct {
	// Name names the profile in messages.
	Name string
	// HostPID and HostNetwork join the node's PID and network namespaces
	// (the processes to attach to, the interfaces to capture on).
	HostPID, HostNetwork bool
	// Privileged runs the container with every capability and device, as
	// kubectl debug's sysadmin profile does.
	Privileged bool
	// Add are capabilities added to the runtime's defaults, all others
	// dropped, when not Privileged.
	Add []corev1.Capability
	// Requests and Limits are the container's resources.
	Requests, Limits corev1.ResourceList
}

// The profiles of kwatch's pods. Memory: kwatch attach of the test
// stack's kube-apiserver peaks at about 117 MiB, its capture's 32 MiB ring
// included (docs/performance.md), well under the limit; each network
// namespace captured in adds a ring (-B sets its size).
var (
	// ProfileAttach is kwatch attach's: eBPF uprobes and sockets' owners
	// (CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON), the processes' memory
	// (CAP_SYS_PTRACE), their network namespaces (setns) and packets
	// (CAP_NET_RAW): privileged, in the node's PID and network namespaces.
	ProfileAttach = Profile{Name: "attach", HostPID: true, HostNetwork: true, Privileged: true,
		Requests: resources("100m", "64Mi"), Limits: resources("", "512Mi")}
	// ProfileCapture is kwatch pcap -i's: a packet socket (CAP_NET_RAW) on
	// the node's interfaces, nothing more.
	ProfileCapture = Profile{Name: "capture", HostNetwork: true, Add: []corev1.Capability{"NET_RAW"},
		Requests: resources("100m", "64Mi"), Limits: resources("", "512Mi")}
)

// resources is a resource list of cpu and memory ("" leaves one out).
func resources(cpu, memory string) corev1.ResourceList {
	l := corev1.ResourceList{}
	if cpu != "" {
		l[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if memory != "" {
		l[corev1.ResourceMemory] = resource.MustParse(memory)
	}
	return l
}

// Spec says which pod to make.
type Spec struct {
	// Node is the node's name (spec.nodeName: the scheduler is not asked).
	Node string
	// Namespace is where the pod goes.
	Namespace string
	// Image is kwatch's image, with kwatch on its PATH; PullPolicy its
	// imagePullPolicy.
	Image      string
	PullPolicy corev1.PullPolicy
	Profile    Profile
	// Deadline is activeDeadlineSeconds: the kubelet ends the pod after
	// it, whatever becomes of the kwatch that made it.
	Deadline time.Duration
	// Idle is how long the pod waits for kwatch to use it: it ends once
	// no kwatch has been running in it for that long (a laptop that went
	// away).
	Idle time.Duration
	// Run names the run that makes it (LabelInstance).
	Run string
	// Description says what it is for, in its kubernetes.io/description
	// annotation.
	Description string
}

// PodSpec returns the pod that runs kwatch on a node, as kubectl debug
// node/NAME makes its node pod (kubectl's debug.go): a generated name,
// pinned to the node by nodeName, tolerating every taint, never
// restarted, ended after its deadline, with no service account token,
// small requests and a memory limit, and the host namespaces and
// privileges of its profile. Its one container holds the pod (kwatch node
// hold) for kwatch to run in it through pods/exec.
func PodSpec(s Spec) *corev1.Pod {
	deadline := int64(s.Deadline / time.Second)
	grace := int64(2)
	no := false
	sc := &corev1.SecurityContext{Privileged: &s.Profile.Privileged}
	if !s.Profile.Privileged {
		sc.Capabilities = &corev1.Capabilities{Add: s.Profile.Add, Drop: []corev1.Capability{"ALL"}}
	}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: podPrefix(s.Node),
			Namespace:    s.Namespace,
			Labels: map[string]string{LabelName: "kwatch", LabelComponent: "node-agent", LabelManagedBy: "kwatch",
				LabelInstance: s.Run},
			Annotations: map[string]string{"kubernetes.io/description": s.Description},
		},
		Spec: corev1.PodSpec{
			NodeName:                      s.Node,
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &deadline,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			HostPID:                       s.Profile.HostPID,
			HostNetwork:                   s.Profile.HostNetwork,
			Volumes:                       []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           s.Image,
				ImagePullPolicy: s.PullPolicy,
				Command:         []string{"kwatch", "node", "hold", "--idle", s.Idle.String()},
				Env: []corev1.EnvVar{
					{Name: EnvNode, ValueFrom: field("spec.nodeName")},
					{Name: EnvPod, ValueFrom: field("metadata.name")},
					{Name: EnvNamespace, ValueFrom: field("metadata.namespace")},
				},
				// kwatch's image holds kwatch alone: /tmp is a folder of
				// the pod's (attach mounts cgroup2 there on a cgroup v1
				// node, for the kernel's connection owners).
				VolumeMounts:             []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
				Resources:                corev1.ResourceRequirements{Requests: s.Profile.Requests, Limits: s.Profile.Limits},
				SecurityContext:          sc,
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
		},
	}
}

// The environment of kwatch's pod: the node it runs on, its own name and
// namespace (the downward API).
const (
	EnvNode      = "KWATCH_NODE"
	EnvPod       = "KWATCH_POD"
	EnvNamespace = "KWATCH_POD_NAMESPACE"
)

// podPrefix is the generateName of a node's pod: "kwatch-NODE-", the node's
// name cut so that the name the API server makes (5 more characters) fits
// a DNS label (RFC 1123, 63 characters), as the kubelet's node names may
// be longer.
func podPrefix(node string) string {
	n := strings.ToLower(node)
	n = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, n)
	if len(n) > 40 {
		n = n[:40]
	}
	n = strings.Trim(n, "-")
	if n == "" {
		return "kwatch-"
	}
	return "kwatch-" + n + "-"
}
