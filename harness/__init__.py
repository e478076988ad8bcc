"""harness: benchmark and regression-test LLM inference engines on Android phones."""

__version__ = "0.1.0"
