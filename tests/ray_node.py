"""``python -m tests.ray_node start ...``: Ray's own ``ray start`` command for one node of a test cluster
(``tests/ray_cluster.py``), with the node's address kept at 127.0.0.1 as written.

``ray start`` turns a loopback ``--node-ip-address`` or ``--address`` into the machine's network address
(``ray._private.services.resolve_ip_for_localhost``), and a node whose address is not exactly 127.0.0.1 has its
raylet, object manager, GCS and workers listen on every interface. Ray's own switch for loopback
(``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) keeps the address but makes ``ray start`` refuse every node but a head,
so this leaves that one resolution out and runs the command unchanged otherwise.
"""

from __future__ import annotations

import sys

from ray._private import services
from ray.scripts.scripts import main

services.resolve_ip_for_localhost = lambda host: host

if __name__ == "__main__":
    sys.exit(main())
