package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// ServiceAccountToken creates the service account if needed and returns a
// bound token for it from the TokenRequest API (signed by the apiserver
// itself; no controller manager needed). Requests made with it are
// authorized by RBAC as system:serviceaccount:<namespace>:<name>, so a
// test can check that a chart's roles allow exactly what they should.
func (c *Cluster) ServiceAccountToken(t testing.TB, namespace, name string) string {
	t.Helper()
	ctx := context.Background()
	sas := c.client.CoreV1().ServiceAccounts(namespace)
	if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create service account %s/%s: %v", namespace, name, err)
	}
	expiry := int64(3600)
	tr, err := sas.CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for service account %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

// ServiceAccountConfig is a client configuration authenticating as the
// service account.
func (c *Cluster) ServiceAccountConfig(t testing.TB, namespace, name string) *rest.Config {
	t.Helper()
	return &rest.Config{
		Host:            c.URL,
		BearerToken:     c.ServiceAccountToken(t, namespace, name),
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caCert},
	}
}

// ServiceAccountKubeconfig writes a kubeconfig file authenticating as the
// service account, for a sidecar process that should run with exactly the
// rights its RBAC grants.
func (c *Cluster) ServiceAccountKubeconfig(t testing.TB, namespace, name string) string {
	t.Helper()
	path := filepath.Join(c.dir, fmt.Sprintf("sa-%s-%s.kubeconfig", namespace, name))
	if err := writeKubeconfig(path, c.URL, c.pki.caCert, c.ServiceAccountToken(t, namespace, name)); err != nil {
		t.Fatal(err)
	}
	return path
}
