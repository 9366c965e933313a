"""MindRouter: an inference gateway for shared GPU clusters."""

__version__ = "0.1.0"
