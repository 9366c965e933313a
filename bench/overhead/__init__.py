"""Gateway overhead benchmark: MindRouter bare and governed beside LiteLLM.

    .venv/bin/python -m bench.overhead [--short]

See docs/benchmarks.md for the method, the figures and how to read them.
"""
