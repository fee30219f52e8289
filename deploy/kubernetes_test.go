// Package deploy checks the Kubernetes manifests of deploy/kubernetes: a
// module of its own, so that the main module does not depend on the
// Kubernetes API types.
package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// manifests decodes every file of kubernetes/ strictly (an unknown or
// duplicate field is an error, as kubectl --validate=strict says) into
// its kind's API type, by kind and name.
func manifests(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in kubernetes/: %v", err)
	}
	objs := map[string]map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "\n---") {
			t.Fatalf("%s: one object per file", f)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(data, &tm); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 Namespace":
			obj = &corev1.Namespace{}
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1 Secret":
			obj = &corev1.Secret{}
		case "v1 Service":
			obj = &corev1.Service{}
		case "apps/v1 DaemonSet":
			obj = &appsv1.DaemonSet{}
		default:
			t.Fatalf("%s: %s %s: a kind this test does not know", f, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(data, obj); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		name := obj.(metav1.Object).GetName()
		if objs[tm.Kind] == nil {
			objs[tm.Kind] = map[string]any{}
		}
		if _, twice := objs[tm.Kind][name]; twice {
			t.Fatalf("%s: a second %s %s", f, tm.Kind, name)
		}
		objs[tm.Kind][name] = obj
	}
	for _, kind := range []string{"Namespace", "ConfigMap", "Secret", "Service", "DaemonSet"} {
		if len(objs[kind]) == 0 {
			t.Fatalf("no %s among the manifests", kind)
		}
	}
	return objs
}

// one is the object of kind named name.
func one[T any](t *testing.T, objs map[string]map[string]any, kind, name string) T {
	t.Helper()
	obj, ok := objs[kind][name].(T)
	if !ok {
		t.Fatalf("no %s %s among the manifests", kind, name)
	}
	return obj
}

func TestManifests(t *testing.T) {
	objs := manifests(t)
	ns := one[*corev1.Namespace](t, objs, "Namespace", "isolate")
	cm := one[*corev1.ConfigMap](t, objs, "ConfigMap", "isolate-worker")
	secret := one[*corev1.Secret](t, objs, "Secret", "isolate-worker")
	svc := one[*corev1.Service](t, objs, "Service", "isolate-api")
	pods := one[*corev1.Service](t, objs, "Service", "isolate-api-pods")
	ds := one[*appsv1.DaemonSet](t, objs, "DaemonSet", "isolate-worker")
	for _, m := range []metav1.ObjectMeta{cm.ObjectMeta, secret.ObjectMeta, svc.ObjectMeta, pods.ObjectMeta, ds.ObjectMeta} {
		if m.Namespace != ns.Name {
			t.Errorf("%s is in namespace %q, want %q", m.Name, m.Namespace, ns.Name)
		}
	}
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the service alone", len(pod.Containers))
	}
	c := pod.Containers[0]

	// On labelled nodes only, matched by its own selector.
	if pod.NodeSelector["isolate-sandbox.io/worker"] != "true" {
		t.Errorf("nodeSelector %v: runs on every node, not the labelled ones", pod.NodeSelector)
	}
	sel, err := metav1.LabelSelectorAsMap(ds.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range sel {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("the DaemonSet's selector %s=%s does not match its pods", k, v)
		}
		for _, s := range []*corev1.Service{svc, pods} {
			if s.Spec.Selector[k] != v {
				t.Errorf("the Service %s's selector lacks %s=%s", s.Name, k, v)
			}
		}
	}

	// The service's flags: the queue and the token from the Secret's
	// files, every $(VAR) a variable the pod has.
	args := map[string]string{}
	for _, a := range c.Args {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	vars := map[string]bool{}
	for _, e := range c.Env {
		vars[e.Name] = true
	}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil || from.ConfigMapRef.Name != cm.Name {
			t.Errorf("envFrom %+v: want the ConfigMap %s", from, cm.Name)
		}
		for k := range cm.Data {
			vars[k] = true
		}
	}
	for _, a := range c.Args {
		for _, m := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(a, -1) {
			if !vars[m[1]] {
				t.Errorf("%s: $(%s) is no variable of the pod", a, m[1])
			}
		}
	}
	secretDir := ""
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret.Name {
			if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o077 != 0 {
				t.Errorf("the Secret's files are readable by others: isolate-serve refuses a token file others may read")
			}
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name {
					secretDir = m.MountPath
				}
			}
		}
	}
	for flag, key := range map[string]string{"--token-file": "token", "--queue-url-file": "queue-url"} {
		if _, ok := secret.StringData[key]; !ok {
			t.Errorf("the Secret has no %s", key)
		}
		if args[flag] != secretDir+"/"+key {
			t.Errorf("%s=%s, want the Secret's %s (%s/%s)", flag, args[flag], key, secretDir, key)
		}
	}
	if _, ok := args["--queue-url"]; ok {
		t.Error("--queue-url in the arguments: the URL may hold a password; use --queue-url-file")
	}

	// The TCP API: on the named port the Service targets, with a token.
	port := intstr.FromString("http")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != port {
		t.Errorf("the Service's ports %+v: want one, targeting the container's %q", svc.Spec.Ports, "http")
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
		return p.Name == "http" && args["--listen"] == ":"+strconv.Itoa(int(p.ContainerPort))
	}) {
		t.Errorf("the container's port http is not --listen %s", args["--listen"])
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service type %s: the API stays inside the cluster", svc.Spec.Type)
	}

	// Probes on /v1/health through the socket, with the token.
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.Exec == nil || !slices.Contains(p.Exec.Command, "probe") ||
			!slices.Contains(p.Exec.Command, "--socket="+args["--socket"]) || !slices.Contains(p.Exec.Command, "--token-file="+args["--token-file"]) {
			t.Errorf("%s probe %+v: want isolate-serve probe on --socket with --token-file", name, p)
		}
	}
	// A pod whose host cannot make boxes is not ready, never restarted in
	// a loop: liveness asks only whether the service answers.
	if p := c.LivenessProbe; p == nil || p.Exec == nil || !slices.Contains(p.Exec.Command, "--live") {
		t.Error("the liveness probe lacks --live")
	}
	if p := c.ReadinessProbe; p != nil && p.Exec != nil && slices.Contains(p.Exec.Command, "--live") {
		t.Error("the readiness probe has --live: it would call a pod that cannot make boxes ready")
	}

	// Resources: requests, and a memory limit that holds, at once,
	// PARALLEL runs and MAX_SESSIONS sessions at MAX_MEM with their
	// MAX_TMP_SIZE of files, the runs' captured output (two streams, kept
	// and encoded) and the service's own 256 MiB.
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Error("no cpu or memory request")
	}
	for flag, key := range map[string]string{"--parallel": "PARALLEL", "--max-mem": "MAX_MEM", "--max-tmp-size": "MAX_TMP_SIZE",
		"--max-output": "MAX_OUTPUT", "--max-sessions": "MAX_SESSIONS", "--max-sessions-per-caller": "MAX_SESSIONS_PER_CALLER",
		"--session-max-timeout": "SESSION_MAX_TIMEOUT", "--store-ttl": "STORE_TTL"} {
		if args[flag] != "$("+key+")" {
			t.Errorf("%s=%s, want $(%s): the memory limit and the affinity are computed from the ConfigMap", flag, args[flag], key)
		}
	}
	parallel, sessions := atoi(cm.Data["PARALLEL"]), atoi(cm.Data["MAX_SESSIONS"])
	maxMem, maxTmp, maxOutput := size(cm.Data["MAX_MEM"]), size(cm.Data["MAX_TMP_SIZE"]), size(cm.Data["MAX_OUTPUT"])
	want := (parallel+sessions)*(maxMem+maxTmp) + parallel*2*2*maxOutput + 256<<20
	if lim := c.Resources.Limits.Memory().Value(); parallel == 0 || sessions == 0 || maxMem == 0 || maxTmp == 0 || maxOutput == 0 || lim < want {
		t.Errorf("memory limit %d < (PARALLEL %d + MAX_SESSIONS %d) x (MAX_MEM %d + MAX_TMP_SIZE %d) + PARALLEL x 4 x MAX_OUTPUT %d + 256 MiB = %d",
			lim, parallel, sessions, maxMem, maxTmp, maxOutput, want)
	}
	if perCaller := atoi(cm.Data["MAX_SESSIONS_PER_CALLER"]); perCaller < 1 || perCaller > sessions {
		t.Errorf("MAX_SESSIONS_PER_CALLER %d: want 1 to MAX_SESSIONS %d", perCaller, sessions)
	}

	// Sessions and stored files live in one pod: the Service keeps a
	// client on its pod as long as either may live, and a headless
	// Service addresses each pod.
	lives := max(seconds(t, cm.Data["SESSION_MAX_TIMEOUT"]), seconds(t, cm.Data["STORE_TTL"]))
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP || svc.Spec.SessionAffinityConfig == nil ||
		svc.Spec.SessionAffinityConfig.ClientIP == nil || svc.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil ||
		int64(*svc.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds) < lives {
		t.Errorf("the Service %s: want ClientIP affinity for at least %d s (a session's or a stored file's life)", svc.Name, lives)
	}
	if pods.Spec.ClusterIP != corev1.ClusterIPNone || len(pods.Spec.Ports) != 1 || pods.Spec.Ports[0].TargetPort != port {
		t.Errorf("the Service %s: want headless (clusterIP None), one port targeting %q", pods.Name, "http")
	}

	// The namespace admits privileged pods, and says so.
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s: pod-security.kubernetes.io/enforce %q, want privileged (the pod is)", ns.Name, ns.Labels["pod-security.kubernetes.io/enforce"])
	}

	// Draining: before SIGTERM the worker stops taking work, on its socket
	// with its token, within the kubelet's grace.
	if h := c.Lifecycle; h == nil || h.PreStop == nil || h.PreStop.Exec == nil ||
		!slices.Equal(h.PreStop.Exec.Command[:min(4, len(h.PreStop.Exec.Command))], []string{"/usr/local/bin/isolate-serve", "drain",
			"--socket=" + args["--socket"], "--token-file=" + args["--token-file"]}) {
		t.Errorf("preStop %+v: want isolate-serve drain --socket=%s --token-file=%s", c.Lifecycle, args["--socket"], args["--token-file"])
	} else {
		timeout := ""
		for _, a := range h.PreStop.Exec.Command {
			if v, ok := strings.CutPrefix(a, "--timeout="); ok {
				timeout = v
			}
		}
		if timeout == "" || pod.TerminationGracePeriodSeconds == nil || seconds(t, timeout) >= *pod.TerminationGracePeriodSeconds {
			t.Errorf("preStop: --timeout=%s, want one shorter than terminationGracePeriodSeconds (the hook's time counts in it)", timeout)
		}
	}

	// Images: an init container builds the languages it names into the
	// node's /var/lib/isolate, each one a language isolate knows, with the
	// worker's image and no shell (the image may have none).
	if len(pod.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the image builder alone", len(pod.InitContainers))
	}
	ic := pod.InitContainers[0]
	build := []string{"/usr/local/bin/isolate", "image", "build"}
	if ic.Image != c.Image || len(ic.Command) <= len(build) || !slices.Equal(ic.Command[:len(build)], build) {
		t.Errorf("init container %s: %s %q, want %q LANG... with the worker's image %s", ic.Name, ic.Image, ic.Command, build, c.Image)
	} else {
		for _, l := range ic.Command[len(build):] {
			if _, err := os.Stat(filepath.Join("..", "langs", "defs", l+".json")); err != nil {
				t.Errorf("init container %s: %s is no language of langs/defs", ic.Name, l)
			}
		}
	}
	if sc := ic.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("init container %s is not privileged: debootstrap makes device nodes, squashfs images need loop devices", ic.Name)
	}
	if !slices.ContainsFunc(ic.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/var/lib/isolate" && !m.ReadOnly }) {
		t.Errorf("init container %s does not write the node's /var/lib/isolate", ic.Name)
	}

	// Privileges: exactly what docs/QUEUE.md says, nothing of the host's
	// namespaces, no API credentials.
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Error("the container is not privileged: isolate needs the node's cgroups, mounts and namespaces (docs/QUEUE.md)")
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Error("the pod shares a host namespace: the boxes need none of them")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the pod mounts a service account token: a box escape would hold API credentials")
	}
	stateMounted := false
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			if v.HostPath.Path != "/var/lib/isolate" {
				t.Errorf("host path %s: the only host mount is /var/lib/isolate", v.HostPath.Path)
			}
			for _, m := range c.VolumeMounts {
				stateMounted = stateMounted || m.Name == v.Name && m.MountPath == "/var/lib/isolate"
			}
		}
	}
	if !stateMounted {
		t.Error("/var/lib/isolate (images, persistent boxes) is not the node's")
	}
}

// seconds reads a duration of the ConfigMap in whole seconds.
func seconds(t *testing.T, s string) int64 {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("duration %q: %v", s, err)
	}
	return int64(d / time.Second)
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// size reads isolate's sizes as the ConfigMap gives them: N, NK, NM, NG
// (powers of 1024).
func size(s string) int64 {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	return atoi(s) * mult
}
