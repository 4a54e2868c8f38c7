package observe_test

import "testing"

func renderPanels(t *testing.T, p *prom, s *system, start interface{}) {}
