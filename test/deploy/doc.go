// Package deploy tests probed's deployment artifacts (deploy/kubernetes, the
// Helm chart deploy/helm/probed, the Containerfile) and the RBAC they grant:
// they decode strictly, render with helm, are accepted by a real API server
// (server-side dry run), agree with each other, and the agent's role allows
// what the agent does and refuses the rest.
//
// The API-server tests need PROBED_TEST_KUBECONFIG (internal/kubetest); the
// chart tests need a helm binary (test/kube/env.sh build puts one in its
// cache; PROBED_HELM names another). Without them those tests skip.
package deploy
