// Package kubeclient builds the Kubernetes clients both binaries use: from
// a kubeconfig file when one is given, else the in-cluster config.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// New returns a clientset for kubeconfig ("" = in-cluster) that identifies
// itself as userAgent in the API server's logs and audit.
func New(kubeconfig, userAgent string) (kubernetes.Interface, error) {
	rc, err := Config(kubeconfig, userAgent)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// NewDynamic returns a dynamic client (custom resources read as
// unstructured data, such as Kthena's ModelServers) for the same config.
func NewDynamic(kubeconfig, userAgent string) (dynamic.Interface, error) {
	rc, err := Config(kubeconfig, userAgent)
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(rc)
}

// Config is the client configuration of kubeconfig ("" = in-cluster).
func Config(kubeconfig, userAgent string) (*rest.Config, error) {
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
	return rc, nil
}
