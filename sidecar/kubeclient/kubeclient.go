// Package kubeclient builds the Kubernetes client both binaries use: from
// a kubeconfig file when one is given, else the in-cluster config.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// New returns a clientset for kubeconfig ("" = in-cluster) that identifies
// itself as userAgent in the API server's logs and audit.
func New(kubeconfig, userAgent string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rc.UserAgent = userAgent
	return kubernetes.NewForConfig(rc)
}
