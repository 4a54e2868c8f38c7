package inject

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tetherproxy/tether/sidecar/config"
)

// graceMargin is added to the sidecar's own needs in the pod's
// terminationGracePeriodSeconds: the kubelet's SIGKILL must not race the
// last stream's final bytes.
const graceMargin = 5 * time.Second

// ensureGracePeriod (plain containers) raises the pod's
// terminationGracePeriodSeconds to the preStop sleep + the sidecar's
// shutdownTimeout + graceMargin, which the sidecar needs to outlive the
// router's drain. It never lowers it. The API server defaults an unset
// value to 30 before webhooks run, so a pod that set a smaller value
// cannot be told from one that set nothing: the value is raised, with a
// warning, rather than the pod denied.
func (inj *Injector) ensureGracePeriod(pod *corev1.Pod, pl *plan) string {
	shutdown := config.DefaultShutdownTimeout
	if pl.cfg != nil {
		shutdown = pl.cfg.Proxy.ShutdownTimeout.Duration
	}
	need := int64((inj.opts.PreStopSleep + shutdown + graceMargin + time.Second - 1) / time.Second)
	have := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		have = *pod.Spec.TerminationGracePeriodSeconds
	}
	if have >= need {
		return ""
	}
	pod.Spec.TerminationGracePeriodSeconds = &need
	why := ""
	if inj.opts.PreStopSleep > 0 {
		why = fmt.Sprintf("the sidecar keeps serving %s after the pod is asked to stop (its preStop hook), then ", inj.opts.PreStopSleep)
	}
	return fmt.Sprintf("tether: terminationGracePeriodSeconds raised from %d to %d: %sin-flight requests get %s to finish (proxy.shutdownTimeout), plus a %s margin",
		have, need, why, shutdown, graceMargin)
}
