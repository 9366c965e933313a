"""Fairness benchmark.

Simulated-clock mode, `python -m bench.fairness`:

    workload.py    seeded open-loop traces, the simulated cluster
    policies.py    ours (the real FairQueue), FCFS, round robin, per-minute rate limit
    simulator.py   discrete-event simulation of slots, streaming and the 150 s deadline
    metrics.py     throughput, utilisation, share error, Jain, light-user delay, rejoin share
    scenarios.py   flood, weights, rejoin, prompt vs output, lone, two models
    decision.py    decision time of the real queue with 500 waiting jobs (wall and CPU time)
    report.py      target table, fairness.json and fairness.md in bench/results/

Real-time end-to-end mode through the HTTP gateway, `python -m bench.fairness.realtime`:

    realtime.py      simulators, gateway processes, streaming clients; weights and flood for
                     FCFS, ours, ours over the Redis state, and two replicas sharing Redis
    gateway_proc.py  one gateway process with its capacity gate chosen on the command line
    fifo.py          the FIFO queue of the FCFS baseline
    rt_metrics.py    the same figures, from what the clients saw
"""
