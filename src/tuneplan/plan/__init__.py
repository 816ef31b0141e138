"""The planner: enumerate the configurations a user could choose, keep those that fit, cost them,
rank them, draw the Pareto front (`search.plan_run`, also `tuneplan.plan_run`), and the
throughput/memory curve over the micro-batch (`curve.curve`); what does not fit and how to make it
fit (`fixes`); a workload file of many jobs (`batch`)."""
