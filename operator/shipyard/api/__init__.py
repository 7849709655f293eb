"""The cluster-facing vocabulary: the CRD models, the naming and labelling conventions, the
reasons, the task bundle format. Pure: imports only `shipyard.agents` and `shipyard.taskformat`,
never a client."""
