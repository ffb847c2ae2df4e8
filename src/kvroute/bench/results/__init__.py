"""What a run produces and how it is read:

record.py   one request's RequestRecord: outcome, error kind, times, usage
metrics.py  records summarised: TTFT, TPOT, ITL, E2E, rates, cache figures, goodput
result.py   the result file: runs, endpoint and workload info, JSON in and out
compare.py  two results compared figure by figure, with bootstrap intervals
"""
