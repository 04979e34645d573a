// Package deploy holds probed's deployment artifacts — the plain manifests of
// deploy/kubernetes and the Helm chart deploy/helm/probed — and decodes manifests
// strictly into typed Kubernetes API objects.
//
// Tests apply the very files a user applies (Kubernetes, below), never a
// retyped copy: the RBAC test binds the ClusterRole read from
// deploy/kubernetes/02-clusterrole.yaml, and the chart tests decode what
// `helm template` renders with the same Decode.
package deploy

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

//go:embed kubernetes/*.yaml kubernetes/options/*.yaml
var kubernetesFiles embed.FS

// Kubernetes is deploy/kubernetes: the plain manifests. At its root the
// default install, exactly what `kubectl apply -f deploy/kubernetes/` applies
// (the files in name order: the namespace first, the admission policy before
// the agent it limits); in options/ what an operator adds for an opt-in
// (the eviction and restart roles, the container runtime's patch), which a
// plain apply of the directory never grants.
var Kubernetes fs.FS = mustSub(kubernetesFiles, "kubernetes")

// Base lists the files of deploy/kubernetes a plain install applies, in
// order (the admission policy before the agent that it limits): every file
// at the directory's root; EvictionFile is applied too when
// --liveness-action=evict.
var Base = []string{NamespaceFile, ServiceAccountFile, ClusterRoleFile, ClusterRoleBindingFile, PolicyFile, DaemonSetFile}

// PolicyFile holds the ValidatingAdmissionPolicy and its binding that narrow
// what the agent's ServiceAccount may write to its own node's pods, its own
// readiness-gate condition, its own Events and evictions in the namespaces
// that allow them (docs/cluster.md "What the agent's identity can do").
const PolicyFile = "04-admissionpolicy.yaml"

// EvictionFile holds the ClusterRole and ClusterRoleBinding that allow
// pods/eviction create, applied only when eviction is enabled.
const EvictionFile = "options/clusterrole-eviction.yaml"

// RestartFile holds the ClusterRole and ClusterRoleBinding that allow
// namespaces get, list and watch (the label that allows restarts), applied only with
// --liveness-action=restart.
const RestartFile = "options/clusterrole-restart.yaml"

// The files of Base by what they hold.
const (
	NamespaceFile          = "00-namespace.yaml"
	ServiceAccountFile     = "01-serviceaccount.yaml"
	ClusterRoleFile        = "02-clusterrole.yaml"
	ClusterRoleBindingFile = "03-clusterrolebinding.yaml"
	DaemonSetFile          = "05-daemonset.yaml"
)

// CRIPatchFile is a strategic-merge patch of the DaemonSet (not an object:
// `kubectl patch --patch-file`) that gives the agent the node's container
// runtime, as the chart's cri.enabled does.
const CRIPatchFile = "options/daemonset-cri.yaml"

func mustSub(f fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return sub
}

// strict decodes YAML or JSON into the typed objects of client-go's scheme
// (every built-in API group), failing on unknown and duplicate fields.
var strict = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	json.SerializerOptions{Yaml: true, Strict: true})

// Decode splits data (YAML documents separated by "---", or one JSON
// document) and decodes each non-empty document strictly into its typed API
// object (*v1.Namespace, *appsv1.DaemonSet, ...). name (a file name) starts
// every error, with the document's index (0-based): an unknown kind, an
// unknown field ("unknown field \"spec.template.spec.hostNetwrk\""), a
// duplicate field or a wrong type is an error.
func Decode(name string, data []byte) ([]runtime.Object, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objects []runtime.Object
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objects, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		if isEmpty(doc) {
			continue
		}
		obj, _, err := strict.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		objects = append(objects, obj)
	}
}

// isEmpty reports whether a YAML document holds only comments and blank
// lines (what `helm template` emits for a template that renders nothing).
func isEmpty(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && !bytes.Equal(line, []byte("---")) {
			return false
		}
	}
	return true
}

// File decodes one file of Kubernetes (a name such as "02-clusterrole.yaml")
// with Decode.
func File(name string) ([]runtime.Object, error) {
	data, err := fs.ReadFile(Kubernetes, name)
	if err != nil {
		return nil, err
	}
	return Decode("deploy/kubernetes/"+name, data)
}
