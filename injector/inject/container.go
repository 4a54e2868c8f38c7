package inject

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/tetherproxy/tether/sidecar/config"
)

// podIPPlaceholder stands for the gossip advertise address while the
// config is rendered; it becomes the kubelet reference $(POD_IP). Annotation
// values cannot contain control characters, so it cannot collide.
const podIPPlaceholder = "\x01"

// sidecarContainer builds the tether-sidecar container for a plan.
func (inj *Injector) sidecarContainer(pl *plan, saMount *corev1.VolumeMount) (corev1.Container, error) {
	o := inj.opts
	c := corev1.Container{
		Name:            ContainerName,
		Image:           o.Image,
		Command:         []string{Binary},
		ImagePullPolicy: o.ImagePullPolicy,
		Env: []corev1.EnvVar{
			fieldEnv("POD_NAME", "metadata.name"),
			fieldEnv("POD_NAMESPACE", "metadata.namespace"),
			fieldEnv("POD_IP", "status.podIP"),
		},
		Ports: []corev1.ContainerPort{
			{Name: AdminPortName, ContainerPort: int32(pl.adminPort), Protocol: corev1.ProtocolTCP},
		},
		Resources: *pl.resources.DeepCopy(),
		// The startup probe holds the router back (native sidecar) until
		// the sidecar's stores and discovery are synced.
		StartupProbe:   probe("/readyz", pl.adminPort, 1, 120),
		ReadinessProbe: probe("/readyz", pl.adminPort, 5, 3),
		LivenessProbe:  probe("/healthz", pl.adminPort, 10, 3),
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			RunAsUser:                ptr.To[int64](65532),
			RunAsGroup:               ptr.To[int64](65532),
			ReadOnlyRootFilesystem:   ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	switch {
	case !o.PlainContainer:
		// A native sidecar: started before the app containers, stopped after them.
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	case o.PreStopSleep > 0:
		// A plain container is stopped together with the router. The
		// preStop hook keeps it serving while the router drains. The
		// image has no shell, and the preStop sleep action needs
		// Kubernetes 1.30 while plain containers are for clusters older
		// than 1.29, so the sidecar binary itself sleeps.
		c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{
			Command: []string{Binary, "--sleep", o.PreStopSleep.String()},
		}}}
	}
	if pl.store == config.StoreGossip {
		c.Ports = append(c.Ports,
			corev1.ContainerPort{Name: GossipPortName, ContainerPort: int32(pl.gossipPort), Protocol: corev1.ProtocolTCP},
			corev1.ContainerPort{Name: GossipUDPPortName, ContainerPort: int32(pl.gossipPort), Protocol: corev1.ProtocolUDP})
	}

	if pl.goMemLimit > 0 {
		// The Go runtime collects harder as the heap nears it, instead of
		// running into the kernel's OOM killer.
		c.Env = append(c.Env, corev1.EnvVar{Name: EnvGoMemLimit, Value: fmt.Sprintf("%dMiB", pl.goMemLimit>>20)})
	}
	if pl.configMap != "" {
		c.Args = []string{"--config", ConfigFile}
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volConfig, MountPath: ConfigDir, ReadOnly: true})
	} else {
		rendered, err := renderEnv(pl.cfg)
		if err != nil {
			return c, err
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: EnvConfig, Value: rendered})
	}
	if pl.logLevel != "" {
		c.Args = append(c.Args, "--log-level", pl.logLevel)
	}
	for _, m := range []struct{ secret, vol, dir string }{
		{pl.redisPasswordSecret, volRedis, RedisPasswordDir},
		{pl.redisCASecret, volRedisCA, RedisCADir},
		{pl.gossipKeySecret, volGossip, GossipKeyDir},
		{pl.jwtSecret, volJWT, JWTDir},
		{pl.tokenSecret, volToken, SessionTokenDir},
		{pl.storeKeySecret, volStore, StoreKeyDir},
	} {
		if m.secret != "" {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: m.vol, MountPath: m.dir, ReadOnly: true})
		}
	}
	// The API server's ServiceAccount admission ran before this webhook and
	// gave the pod's containers their token, but not the container added
	// here; the sidecar needs it to watch pods.
	if saMount != nil {
		c.VolumeMounts = append(c.VolumeMounts, *saMount)
	}
	return c, nil
}

// sidecarVolumes are the pod volumes the sidecar's mounts need, in a stable order.
func sidecarVolumes(pl *plan) []corev1.Volume {
	var vs []corev1.Volume
	if pl.configMap != "" {
		vs = append(vs, corev1.Volume{Name: volConfig, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: pl.configMap},
			Items:                []corev1.KeyToPath{{Key: ConfigMapKey, Path: ConfigMapKey}},
		}}})
	}
	secret := func(vol, name string, keys ...string) corev1.Volume {
		s := &corev1.SecretVolumeSource{SecretName: name}
		for _, k := range keys {
			s.Items = append(s.Items, corev1.KeyToPath{Key: k, Path: k})
		}
		return corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{Secret: s}}
	}
	if pl.redisPasswordSecret != "" {
		vs = append(vs, secret(volRedis, pl.redisPasswordSecret, RedisPasswordKey))
	}
	if pl.redisCASecret != "" {
		vs = append(vs, secret(volRedisCA, pl.redisCASecret, RedisCAKey))
	}
	if pl.gossipKeySecret != "" {
		vs = append(vs, secret(volGossip, pl.gossipKeySecret, GossipKeyKey))
	}
	if pl.jwtSecret != "" {
		// The whole Secret: which key files exist depends on the algorithms.
		vs = append(vs, secret(volJWT, pl.jwtSecret))
	}
	if pl.tokenSecret != "" {
		// The whole Secret: a ConfigMap config may also name its
		// previous key (previousKeyFile) while the key is rotated.
		vs = append(vs, secret(volToken, pl.tokenSecret))
	}
	if pl.storeKeySecret != "" {
		vs = append(vs, secret(volStore, pl.storeKeySecret, StoreKeyKey))
	}
	return vs
}

// renderEnv renders the config as YAML for TETHER_CONFIG. The kubelet
// expands $(VAR) in env values, so every '$' is escaped as "$$" except the
// gossip advertise address, which is deliberately $(POD_IP).
func renderEnv(cfg *config.Config) (string, error) {
	c := *cfg
	if g := c.Store.Gossip; g != nil && g.Advertise == "" {
		gc := *g
		gc.Advertise = podIPPlaceholder
		c.Store.Gossip = &gc
	}
	b, err := yaml.Marshal(&c)
	if err != nil {
		return "", fmt.Errorf("render sidecar config: %w", err)
	}
	s := strings.ReplaceAll(string(b), "$", "$$")
	s = strings.ReplaceAll(s, `"\x01"`, `"$(POD_IP)"`)
	return s, nil
}

// ExpandKubeletEnv expands $(VAR) references in an env value the way the
// kubelet does ("$$" is a literal "$", unknown references stay as they
// are). Tests and harnesses that start a sidecar from an injected pod spec,
// playing the kubelet, use it on TETHER_CONFIG.
func ExpandKubeletEnv(v string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '$' || i+1 >= len(v) {
			b.WriteByte(v[i])
			continue
		}
		switch v[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(v[i+2:], ')'); end >= 0 {
				name := v[i+2 : i+2+end]
				if val, ok := env[name]; ok {
					b.WriteString(val)
					i += 2 + end
					continue
				}
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path},
	}}
}

func probe(path string, port int, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromInt(port), Scheme: corev1.URISchemeHTTP,
		}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
		TimeoutSeconds:   1,
		SuccessThreshold: 1,
	}
}
