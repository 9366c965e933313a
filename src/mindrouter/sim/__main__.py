"""`python -m mindrouter.sim --engine vllm --port 8001 ...`: run one simulated engine."""

from mindrouter.sim.cli import main

raise SystemExit(main())
