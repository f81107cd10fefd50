"""Plain statistics of load-test figures: batch means, Welch's test, degradation, change points, the
scalability models. No Django: runs (at finalize) and the results history (comparisons, the journey)
both use them, and tests and benchmarks call them directly."""
