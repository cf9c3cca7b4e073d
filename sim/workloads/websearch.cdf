# Web search flow sizes: the distribution measured in a production web-search cluster by
# Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010 (Figure 4, flow sizes of the
# background traffic and queries), as re-plotted for simulation by Alizadeh et al.,
# "pFabric: Minimal Near-Optimal Datacenter Transport", SIGCOMM 2013 (Figure 4, "web search").
# The points below were read off that published CDF by hand for softverbs (they are not copied
# from any simulator's file); between points the size is taken uniform (linear interpolation).
# Mean about 1.6 MB; about 60 % of the flows are under 200 KB and most bytes are in flows
# above 1 MB.
#
# Format: one point a line, "size_in_bytes cumulative_probability", sizes increasing,
# probabilities non-decreasing from 0 to exactly 1; '#' starts a comment.
0        0
10000    0.15
20000    0.20
30000    0.30
50000    0.40
80000    0.53
200000   0.60
1000000  0.70
2000000  0.80
5000000  0.90
10000000 0.97
30000000 1
