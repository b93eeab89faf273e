"""The lab: network namespaces with real servers and clients (netlab), and what runs inside them
(echo server, probe, prober, the forwarder to loopback, the kernel's element notifications)."""
