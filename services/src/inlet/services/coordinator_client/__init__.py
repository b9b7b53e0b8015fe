"""The commit coordinator's client side, for every service and tool that commits or reads commits.

``client`` (:class:`CoordinatorClient`, :class:`GrpcCommitProtocol`, core's ``CommitProtocol`` over
gRPC) and ``convert`` (core commit metadata and instants <-> ``inlet.proto.hudi.v1``). Nothing here
depends on the coordinator service's package (``inlet.services.coordinator``), so writers, the CLI
and table services use it without pulling in the server, its store or its PostgreSQL driver.
"""
