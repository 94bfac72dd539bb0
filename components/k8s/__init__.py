"""What gets deployed into Kubernetes for the cluster: add-ons, operators, namespace, queue, monitoring, security."""
