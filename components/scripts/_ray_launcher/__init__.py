"""The parts of ray_launcher.py, the program every pod of a multi-node Ray run executes.

The ConfigMap of ray_launcher.py carries this package with it: the pod sees /scripts/ray_launcher.py
and /scripts/_ray_launcher/*.py (components/workloads/script_files.py), and the entry script puts
its own directory on sys.path. Only the standard library is imported here; `ray` itself only in the
head's node-wait child (node_wait.py).

    common.py     exit codes, the configuration error, the log lines
    config.py     the environment contract, read and checked before anything starts
    auth.py       which Ray this pod talks to (an explicit address) and how (token authentication)
    start.py      the `ray start` command lines and the ray CLI around them
    head.py       rank 0: start the head, wait for the nodes (alive and healthy), train, tell a lost
                  peer or an unhealthy node from a failure, never turn a stop into a success
    node_wait.py  the head's questions to Ray (NUM_NODES alive? a peer lost?), in a child process
                  it can abandon
    node_health.py  the head's questions to the Kubernetes API: is a node of the run unhealthy
                  (the node monitoring agent's condition, NotReady, cordoned, tainted, gone)?
    training.py   the training command as the head's child: signals passed on, the marker written
    worker.py     every other rank: wait for the head, join it, tell a lost head from a failure
    marker.py     the run-done marker: idle when the run already finished, write it on success
    processes.py  PID-1 duties: signals, passing them on, stopping and reaping children

Imports run one way, without a circle: common and processes import nothing of the package; auth
reads common; config reads auth; node_health reads common; start, marker and node_wait read those;
training reads marker; head and worker read them all; nothing here imports the entry script.
"""
