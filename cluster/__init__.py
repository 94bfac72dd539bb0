"""The simulated cluster: a real control plane, fake GPU nodes and the real operators on 127.0.0.1 (docs/simulated-cluster.md)."""
