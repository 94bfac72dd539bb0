"""How long a GPU node repair takes, as EKS documents it: the time a run's waits and deadline leave.

EKS node auto repair acts on a node condition once it has lasted its wait (EKS user guide,
node-repair, "Repair after": awsdocs/amazon-eks-user-guide latest/ug/nodes/node-repair.adoc):
`AcceleratedHardwareReady` (the node monitoring agent's GPU condition) after 10 minutes, by a
reboot or a replacement depending on the reason (most H100 XIDs reboot, 74/79/119/120/121/140
replace: the same guide, node-health-nma "NVIDIA XID error codes"); `ContainerRuntimeReady`,
`KernelReady`, `NetworkingReady`, `StorageReady` and the kubelet's `Ready` after 30 minutes, by a
replacement. While it waits, the run's pods on the node fail or hang; after it, they are lost with
the node and come back on the rebooted node or its replacement, which pulls the training image cold
(the project's margin for a cold pull, IMAGE_PULL_MARGIN_SECONDS: 600 s; FACTS "Start-up latency":
4-6 min for a 15-20 GB image, so the margin also leaves a few minutes for the boot and the join,
which no published figure bounds).

Nothing here is a setting: the waits are EKS's defaults (a node group's nodeRepairConfigOverrides
could change them; this stack sets none, components/aws/gpu_nodes.py).
"""

from __future__ import annotations

from components.stack.config import IMAGE_PULL_MARGIN_SECONDS, WorkloadsConfig

# Condition -> EKS's default wait before it repairs (seconds; node-repair.adoc, "Repair after").
REPAIR_WAIT_SECONDS = {
    "AcceleratedHardwareReady": 10 * 60,
    "ContainerRuntimeReady": 30 * 60,
    "KernelReady": 30 * 60,
    "NetworkingReady": 30 * 60,
    "StorageReady": 30 * 60,
    "Ready": 30 * 60,
}
LONGEST_REPAIR_WAIT_SECONDS = max(REPAIR_WAIT_SECONDS.values())


def repair_bound_seconds() -> int:
    """From a node going bad to a run's pod able to start on its repaired or replaced node: the
    longest repair wait plus a cold image pull. What the Ray launcher's waits are (the head for its
    nodes, a worker for its head), so that one repair never looks like a peer that is gone for good."""
    return LONGEST_REPAIR_WAIT_SECONDS + IMAGE_PULL_MARGIN_SECONDS


def restart_room_seconds(restarts: int) -> int:
    """What `restarts` infrastructure restarts (workloads.infrastructureRestarts: Kueue's requeue
    limit and the start ledger's bound) add to a run's deadline: a Job's activeDeadlineSeconds keeps
    counting through pod failures its pod failure policy ignores (Kubernetes v1.35.4
    pkg/controller/job/job_controller.go: measured from status.startTime, which only a resume after
    a suspension sets anew, as a Kueue requeue does), so each repair the bounds allow, restarted in
    place, is time the run must still have."""
    return restarts * repair_bound_seconds()


# --- a reboot repair as a disruption ------------------------------------------------------------
#
# Most H100 XIDs are repaired by a reboot (node-health-nma: 13, 31, 48, 63, 64, 94, 95), which keeps
# the Node object. Without graceful node shutdown the kubelet comes back and reports the run's lost
# container as `ContainerStatusUnknown`, exit 137, with no DisruptionTarget condition (Kubernetes
# v1.35.4 pkg/kubelet/kubelet_pods.go convertToAPIContainerStatuses): the Job's pod failure policy
# counts it against workloads.retries. nodeadm's default kubelet configuration sets no
# shutdownGracePeriod (awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go
# defaultKubeletSubConfig), the kubelet's default is 0s (off). With it, the kubelet takes a systemd
# inhibitor lock, and on the shutdown a reboot starts it marks every pod Failed with
# DisruptionTarget=True (reason TerminationByKubelet) *before* stopping it
# (pkg/kubelet/nodeshutdown/nodeshutdown_manager.go killPods, kubelet.go SyncTerminatingPod sets
# the status first), and gives each pod min(its own terminationGracePeriodSeconds, its priority
# group's period): the trainer checkpoints on SIGTERM as on a drain, and the policy ignores the pod.
#
# The periods: critical pods (system-node-critical: the CNI, the FSx CSI node plugin that unmounts
# /fsx) get the last CRITICAL_PODS_SHUTDOWN_SECONDS, the 30 s a pod gets by default
# (terminationGracePeriodSeconds' default); every other pod the rest. The rest is the largest
# grace a training pod may have (workloads.terminationGracePeriodSeconds' upper bound), not the
# stack's value: the node's launch template then does not change (and roll the GPU nodes) when a
# run's grace does, and the kubelet waits only as long as the pods really take (each its own
# grace at most). The kubelet raises logind's InhibitDelayMaxSec to the total itself
# (nodeshutdown_manager_linux.go start). Not verified from here: that EKS's reboot is an OS
# reboot that reaches systemd (an EC2 RebootInstances is; it hard-reboots an instance that has not
# shut down "within a few minutes", EC2 API reference) - the DisruptionTarget condition is written
# as the shutdown starts, so a hard reboot after it cuts the checkpoint short, not the condition.
CRITICAL_PODS_SHUTDOWN_SECONDS = 30


def training_grace_upper_bound() -> int:
    """The largest terminationGracePeriodSeconds a training pod can have (the key's bound)."""
    meta = WorkloadsConfig.model_fields["termination_grace_period_seconds"].metadata
    return next(m.le for m in meta if getattr(m, "le", None) is not None)


def shutdown_grace_seconds() -> int:
    """The kubelet's shutdownGracePeriod on the GPU nodes: the pods' part, then the critical pods'."""
    return training_grace_upper_bound() + CRITICAL_PODS_SHUTDOWN_SECONDS
