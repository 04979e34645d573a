package cri

import "github.com/prometheus/client_golang/prometheus"

// Calls is probed_cri_calls_total, for the tests.
func (c *Client) Calls() *prometheus.CounterVec { return c.calls }
