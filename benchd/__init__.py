"""benchd: measured tradeoffs for choosing a local LLM.

The pipeline, one module a step: api → queue → scheduler → supervisor → runtimes/<adapter> → probe →
metrics → runbook/report/pareto/compare → lock.
"""

__version__ = "0.1.0"
