// Package charttest checks the Helm chart deploy/helm/idem with helm's own
// packages: helm lint, and helm template's rendering, whose manifests it
// reads back and checks. It is a module of its own so that the idem
// module does not link helm and Kubernetes' client.
package charttest
