"""The server's counters, written as Prometheus text at ``GET /metrics`` (no client library needed).

Updated from the server's event loop only, so they need no lock.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

__all__ = ["LATENCY_BUCKETS", "Metrics"]

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Upper bounds (seconds) of the request latency histogram; +Inf is implied."""


class Metrics:
    """Requests by endpoint and status code, a latency histogram per endpoint, and batch sizes."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, int], int] = defaultdict(int)
        self.latency_counts: dict[str, list[int]] = defaultdict(lambda: [0] * (len(LATENCY_BUCKETS) + 1))
        self.latency_sum: dict[str, float] = defaultdict(float)
        self.batches = 0
        self.batched_acts = 0
        self.expired = 0

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        """Count one answered request and its latency."""
        self.requests[(endpoint, status)] += 1
        self.latency_counts[endpoint][bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.latency_sum[endpoint] += seconds

    def text(self, gauges: dict[str, tuple[str, float]]) -> str:
        """The Prometheus text exposition, with ``gauges``: name -> (help, value)."""
        lines = [
            "# HELP workbench_serve_requests_total Requests answered, by endpoint and status code.",
            "# TYPE workbench_serve_requests_total counter",
        ]
        for (endpoint, status), count in sorted(self.requests.items()):
            lines.append(f'workbench_serve_requests_total{{endpoint="{endpoint}",code="{status}"}} {count}')
        lines += [
            "# HELP workbench_serve_request_seconds Time from a request's arrival to its answer.",
            "# TYPE workbench_serve_request_seconds histogram",
        ]
        for endpoint, counts in sorted(self.latency_counts.items()):
            total = 0
            for bound, count in zip((*LATENCY_BUCKETS, float("inf")), counts):
                total += count
                le = "+Inf" if bound == float("inf") else repr(bound)
                lines.append(f'workbench_serve_request_seconds_bucket{{endpoint="{endpoint}",le="{le}"}} {total}')
            lines.append(f'workbench_serve_request_seconds_sum{{endpoint="{endpoint}"}} {self.latency_sum[endpoint]}')
            lines.append(f'workbench_serve_request_seconds_count{{endpoint="{endpoint}"}} {total}')
        counters = {
            "workbench_serve_batches_total": ("Batches of acts answered together.", self.batches),
            "workbench_serve_batched_acts_total": ("Acts answered in those batches.", self.batched_acts),
            "workbench_serve_episodes_expired_total": ("Idle episodes ended by the server.", self.expired),
        }
        for name, (doc, value) in counters.items():
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} counter", f"{name} {value}"]
        for name, (doc, value) in gauges.items():
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name} {value}"]
        return "\n".join(lines) + "\n"
