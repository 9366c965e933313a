"""Fairness benchmark, simulated-clock mode (BENCHMARKS.md §2): `python -m bench.fairness`.

    workload.py    seeded open-loop traces, the simulated cluster
    policies.py    ours (the real FairQueue), FCFS, round robin, per-minute rate limit
    simulator.py   discrete-event simulation of slots, streaming and the 150 s deadline
    metrics.py     throughput, utilisation, share error, Jain, light-user delay, rejoin share
    scenarios.py   flood, weights, rejoin, prompt vs output, lone, two models
    decision.py    decision time of the real queue with 500 waiting jobs (wall and CPU time)
    report.py      target table, fairness.json and fairness.md in bench/results/

The real-time end-to-end mode through the HTTP gateway, and two replicas sharing Redis, are not
part of this package yet.
"""
