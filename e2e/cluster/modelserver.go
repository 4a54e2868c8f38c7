package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// ModelServerGVR is Kthena's ModelServer resource.
var ModelServerGVR = schema.GroupVersionResource{Group: "networking.serving.volcano.sh", Version: "v1alpha1", Resource: "modelservers"}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// modelServerCRD is a minimal ModelServer CRD written from Kthena's
// documented fields: spec.model (at most 256 bytes), inferenceEngine
// (vLLM or SGLang), workloadSelector (matchLabels, pdGroup with groupKey,
// prefillLabels and decodeLabels), workloadPort (port 1..65535, protocol
// http or https), trafficPolicy (timeout, retry) and trafficPolicy's
// sessionSticky block (sessionAffinitySeconds at least 1 when set, 1..16
// sources of type Header, Query, Cookie or JWTClaim). The schema is
// structural, so the API server prunes fields it does not list and
// refuses values outside these bounds, as it does with Kthena's own.
const modelServerCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: modelservers.networking.serving.volcano.sh
spec:
  group: networking.serving.volcano.sh
  scope: Namespaced
  names: {kind: ModelServer, listKind: ModelServerList, plural: modelservers, singular: modelserver}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [inferenceEngine, workloadSelector, workloadPort]
            properties:
              model: {type: string, maxLength: 256}
              inferenceEngine: {type: string, enum: [vLLM, SGLang]}
              workloadSelector:
                type: object
                properties:
                  matchLabels: {type: object, additionalProperties: {type: string}}
                  pdGroup:
                    type: object
                    required: [groupKey, prefillLabels, decodeLabels]
                    properties:
                      groupKey: {type: string}
                      prefillLabels: {type: object, additionalProperties: {type: string}}
                      decodeLabels: {type: object, additionalProperties: {type: string}}
              workloadPort:
                type: object
                required: [port]
                properties:
                  port: {type: integer, format: int32, minimum: 1, maximum: 65535}
                  protocol: {type: string, enum: [http, https], default: http}
              trafficPolicy:
                type: object
                properties:
                  timeout: {type: string}
                  retry:
                    type: object
                    properties:
                      attempts: {type: integer, format: int32}
                      retryInterval: {type: string}
                  sessionSticky:
                    type: object
                    required: [sources]
                    properties:
                      sessionAffinitySeconds: {type: integer, format: int32, minimum: 1}
                      sources:
                        type: array
                        minItems: 1
                        maxItems: 16
                        items:
                          type: object
                          required: [type, name]
                          properties:
                            type: {type: string, enum: [Header, Query, Cookie, JWTClaim]}
                            name: {type: string, minLength: 1}
          status: {type: object}
`

// InstallModelServerCRD creates the ModelServer CRD and waits until the
// API server serves the resource.
func (c *Cluster) InstallModelServerCRD(t testing.TB) {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(modelServerCRD), &obj); err != nil {
		t.Fatalf("ModelServer CRD: %v", err)
	}
	dyn := c.Dynamic(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := dyn.Resource(crdGVR).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ModelServer CRD: %v", err)
	}
	// Established, and then served: a list succeeds once the API server's
	// discovery has picked the new resource up.
	var last error
	for ctx.Err() == nil {
		if _, last = dyn.Resource(ModelServerGVR).Namespace("default").List(ctx, metav1.ListOptions{}); last == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("ModelServer CRD never served: %v", last)
}

// Dynamic is a dynamic client with the cluster's admin rights.
func (c *Cluster) Dynamic(t testing.TB) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

// ModelServerReaderRole binds, in namespace, a ClusterRole allowing
// get/list/watch on modelservers (the rule of the chart's ModelServer
// role, which the injector binds the same way) to a service account.
func (c *Cluster) ModelServerReaderRole(t testing.TB, namespace, serviceAccount string) {
	t.Helper()
	ctx := context.Background()
	rbac := c.client.RbacV1()
	name := "tether-modelserver-reader"
	if _, err := rbac.ClusterRoles().Get(ctx, name, metav1.GetOptions{}); err != nil {
		if _, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{ModelServerGVR.Group}, Resources: []string{ModelServerGVR.Resource},
				Verbs: []string{"get", "list", "watch"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create cluster role: %v", err)
		}
	}
	if _, err := rbac.RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s", name, serviceAccount)},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create role binding: %v", err)
	}
}
