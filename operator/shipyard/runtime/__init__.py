"""The operator's runtime: the trial drivers and their executor, the Sweep daemons, task
images and Kueue admission at run time, the wake registry, leader election, the thread pools,
settings and metrics. The kopf registrations that feed it are `shipyard.handlers`."""
