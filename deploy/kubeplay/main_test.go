package main

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// kubelet gives a container the ConfigMap's keys, then its own env (the
// downward API's spec.nodeName resolved), and expands $(VAR) in its
// command and arguments as the kubelet does: $$ is a $, an unknown
// variable stays as written.
func TestKubelet(t *testing.T) {
	cm := &corev1.ConfigMap{Data: map[string]string{"PARALLEL": "4", "B": "b"}}
	cm.Name = "cfg"
	c := &corev1.Container{
		Name:    "c",
		Command: []string{"/bin/x", "$(B)"},
		Args:    []string{"--parallel=$(PARALLEL)", "--name=$(NODE_NAME)", "$$(PARALLEL)", "$(UNKNOWN)", "--b=$(B)"},
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
		Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			{Name: "B", Value: "own"}},
	}
	kubelet(c, cm, "node-1")
	if want := []string{"/bin/x", "own"}; !slices.Equal(c.Command, want) {
		t.Errorf("command %q, want %q", c.Command, want)
	}
	if want := []string{"--parallel=4", "--name=node-1", "$(PARALLEL)", "$(UNKNOWN)", "--b=own"}; !slices.Equal(c.Args, want) {
		t.Errorf("args %q, want %q", c.Args, want)
	}
	if c.EnvFrom != nil {
		t.Errorf("envFrom %v left", c.EnvFrom)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if _, twice := env[e.Name]; twice {
			t.Errorf("env %s given twice", e.Name)
		}
		if e.ValueFrom != nil {
			t.Errorf("env %s still from %v", e.Name, e.ValueFrom)
		}
		env[e.Name] = e.Value
	}
	if env["PARALLEL"] != "4" || env["NODE_NAME"] != "node-1" || env["B"] != "own" {
		t.Errorf("env %v", env)
	}
}
