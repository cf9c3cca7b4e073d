# Data-mining (Hadoop-like) flow sizes: the distribution measured in a large data-mining
# cluster by Greenberg et al., "VL2: A Scalable and Flexible Data Center Network",
# SIGCOMM 2009 (Figure 2, flow size distribution), as re-plotted for simulation by
# Alizadeh et al., "pFabric: Minimal Near-Optimal Datacenter Transport", SIGCOMM 2013
# (Figure 4, "data mining"). The points below were read off that published CDF by hand for
# softverbs, in 1460-byte segments as the figure's axis counts them, converted to bytes;
# between points the size is taken uniform (linear interpolation). Heavy-tailed: half the
# flows are at most one segment, 80 % at most 10 KB, and nearly all bytes are in the 5 % of flows
# above 3 MB (the largest are 1 GB: cap them with `max_flow_bytes` in a scenario).
#
# Format: one point a line, "size_in_bytes cumulative_probability", sizes increasing,
# probabilities non-decreasing from 0 to exactly 1; '#' starts a comment.
0          0
1460       0.50
2920       0.60
4380       0.70
10220      0.80
389820     0.90
3076220    0.95
97333820   0.99
973333820  1
