"""The training workloads: pod builders by concern (sizing, env, volumes, placement), then one module per workload."""
