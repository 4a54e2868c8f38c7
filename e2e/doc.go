// Package e2e holds tether's end-to-end scenarios (build tag e2e): a real
// kube-apiserver and etcd (package cluster), tether-sidecar and modelsim
// as processes on loopback, pod status written as a kubelet would. Run
// them with make e2e, or one with make e2e RUN=TestScenario3.
package e2e
