// Command kubeplay turns the DaemonSet of deploy/kubernetes into the Pod
// one node's kubelet would run, for `podman kube play` on one machine
// (scripts/kube-test.sh). It does what the kubelet does before it starts
// the pod: the ConfigMap's keys and the downward API's spec.nodeName
// become the containers' environment, and $(VAR) in their commands and
// arguments is expanded from it (podman 4.3 knows no DaemonSet, and
// neither spec.nodeName nor $(VAR)). It changes only what one test
// machine needs, and prints each change:
//
//   - the Secret volume becomes a host directory that the test lays out
//     as the kubelet does (token -> ..data/token, ..data -> ..TIMESTAMP);
//   - /var/lib/isolate becomes a directory of the test's own, and the
//     emptyDir /run/isolate one too (so the test reaches the pod's socket);
//   - the pod joins the host's network (the test's Redis is on loopback),
//     so --listen moves to a loopback port of the test's, and the
//     container's ports go (podman maps them only on a pod network);
//   - the image is the test's;
//   - its init containers are podman's type "always": run at each start
//     of the pod, as the kubelet does, and kept until the pod goes, so
//     that the test reads their exit status.
//
// Probes, the preStop hook, privileges, resources and mounts are kept as
// the manifest has them. It also writes the probe and preStop commands,
// one per line ("NAME ARG..." with each ARG shell-quoted), for the test to
// run as the kubelet does (exec in the container), the container's name
// ("container NAME"), each init container's ("init NAME") and the
// languages the init container builds ("images LANG...").
//
//	go run ./kubeplay -image IMG -secret DIR -state DIR -run DIR -listen ADDR -node NAME -pod FILE -hooks FILE
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	var o struct{ dir, image, secret, state, run, listen, node, pod, hooks string }
	flag.StringVar(&o.dir, "manifests", "kubernetes", "the manifests' `DIR`")
	flag.StringVar(&o.image, "image", "", "the container `IMAGE`")
	flag.StringVar(&o.secret, "secret", "", "host `DIR` laid out as the kubelet lays out the Secret")
	flag.StringVar(&o.state, "state", "", "host `DIR` for /var/lib/isolate")
	flag.StringVar(&o.run, "run", "", "host `DIR` for /run/isolate")
	flag.StringVar(&o.listen, "listen", "", "--listen `ADDR` on the host's network")
	flag.StringVar(&o.node, "node", "", "the node's `NAME` (spec.nodeName)")
	flag.StringVar(&o.pod, "pod", "", "write the Pod to `FILE`")
	flag.StringVar(&o.hooks, "hooks", "", "write the probe and preStop commands to `FILE`")
	flag.Parse()
	for name, v := range map[string]string{"image": o.image, "secret": o.secret, "state": o.state, "run": o.run,
		"listen": o.listen, "node": o.node, "pod": o.pod, "hooks": o.hooks} {
		if v == "" {
			fail("-%s is needed", name)
		}
	}
	var ds appsv1.DaemonSet
	var cm corev1.ConfigMap
	read(filepath.Join(o.dir, "daemonset.yaml"), &ds)
	read(filepath.Join(o.dir, "configmap.yaml"), &cm)

	spec := ds.Spec.Template.Spec.DeepCopy()
	spec.NodeSelector = nil
	spec.HostNetwork = true
	say("hostNetwork: true (Redis on the host's loopback); --listen=%s", o.listen)
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		dir := ""
		switch {
		case v.Secret != nil:
			dir = o.secret
		case v.HostPath != nil && v.HostPath.Path == "/var/lib/isolate":
			dir = o.state
		case v.EmptyDir != nil:
			dir = o.run
		default:
			continue
		}
		say("volume %s: host directory %s", v.Name, dir)
		directory := corev1.HostPathDirectory
		v.VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &directory}}
	}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			kubelet(&list[i], &cm, o.node)
			list[i].Image = o.image
			for j, a := range list[i].Args {
				if strings.HasPrefix(a, "--listen=") {
					list[i].Args[j] = "--listen=" + o.listen
				}
			}
			// Podman maps container ports only on a network of the pod's
			// own; on the host's the service listens there itself.
			list[i].Ports = nil
		}
	}
	// Init containers run at each start of the pod, as the kubelet runs
	// them, and stay until the pod goes, for the test to read their exit
	// status (podman's default, "once", removes them as they end, and
	// 4.3 sometimes fails to).
	say("init containers: podman's type always")
	pod := corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Labels: ds.Spec.Template.Labels,
			Annotations: map[string]string{"io.podman.annotations.init.container.type": "always"}},
		Spec: *spec,
	}
	out, err := yaml.Marshal(pod)
	if err != nil {
		fail("%v", err)
	}
	if err := os.WriteFile(o.pod, out, 0o644); err != nil {
		fail("%v", err)
	}

	var hooks strings.Builder
	c := spec.Containers[0]
	for name, h := range map[string]*corev1.ExecAction{"readiness": execOf(c.ReadinessProbe), "liveness": execOf(c.LivenessProbe)} {
		if h != nil {
			fmt.Fprintf(&hooks, "%s %s\n", name, quote(h.Command))
		}
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Exec != nil {
		fmt.Fprintf(&hooks, "prestop %s\n", quote(c.Lifecycle.PreStop.Exec.Command))
	}
	fmt.Fprintf(&hooks, "container %s-%s\n", ds.Name, c.Name)
	for _, ic := range spec.InitContainers {
		fmt.Fprintf(&hooks, "init %s-%s\n", ds.Name, ic.Name)
	}
	build := []string{"/usr/local/bin/isolate", "image", "build"}
	for _, ic := range spec.InitContainers {
		if len(ic.Command) > len(build) && slices.Equal(ic.Command[:len(build)], build) {
			fmt.Fprintf(&hooks, "images %s\n", strings.Join(ic.Command[len(build):], " "))
		}
	}
	if err := os.WriteFile(o.hooks, []byte(hooks.String()), 0o644); err != nil {
		fail("%v", err)
	}
}

// kubelet gives c the environment the kubelet would (its envFrom
// ConfigMap cm, then its env, spec.nodeName as node) and expands $(VAR)
// in its command and arguments from it.
func kubelet(c *corev1.Container, cm *corev1.ConfigMap, node string) {
	vars := map[string]string{}
	var env []corev1.EnvVar
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil || from.ConfigMapRef.Name != cm.Name {
			fail("container %s: envFrom %+v: only the ConfigMap %s is known", c.Name, from, cm.Name)
		}
		keys := make([]string, 0, len(cm.Data))
		for k := range cm.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			vars[k] = cm.Data[k]
			env = append(env, corev1.EnvVar{Name: k, Value: cm.Data[k]})
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
				fail("container %s: env %s: only spec.nodeName is known", c.Name, e.Name)
			}
			e = corev1.EnvVar{Name: e.Name, Value: node}
		}
		if _, ok := vars[e.Name]; ok { // env wins over envFrom
			env = slices.DeleteFunc(env, func(x corev1.EnvVar) bool { return x.Name == e.Name })
		}
		vars[e.Name] = e.Value
		env = append(env, e)
	}
	c.EnvFrom, c.Env = nil, env
	ref := regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	expand := func(s string) string {
		return ref.ReplaceAllStringFunc(s, func(m string) string {
			if m == "$$" {
				return "$"
			}
			if v, ok := vars[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	for i := range c.Command {
		c.Command[i] = expand(c.Command[i])
	}
	for i := range c.Args {
		c.Args[i] = expand(c.Args[i])
	}
}

func execOf(p *corev1.Probe) *corev1.ExecAction {
	if p == nil {
		return nil
	}
	return p.Exec
}

// quote shell-quotes each word.
func quote(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func read(file string, obj any) {
	data, err := os.ReadFile(file)
	if err != nil {
		fail("%v", err)
	}
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		fail("%s: %v", file, err)
	}
}

func say(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "kubeplay: "+format+"\n", a...)
}

func fail(format string, a ...any) {
	say(format, a...)
	os.Exit(2)
}
