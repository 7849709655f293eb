"""The kopf registrations only: each resource's watch events, timers and daemons, handed to
`shipyard.runtime` (drivers, daemons, the wake registry). No decisions and no state of their
own; resource handlers do not import each other (`lint-imports`)."""
