"""The results store: the code that writes, rolls up and reads a run's interval rows.

One module per step of a result's life (``docs/development/architecture.md``, *The results store*):

- ``sink``: the write — ``interval_write`` and the engine's ``ShardSink``: one ``ShardInterval`` row per
  shard and second, one ``PageInterval`` row per label (and its ``SlowTrace``);
- ``storage``: the stored forms of histograms and means (binary, legacy JSON);
- ``columns``: the read — a run's rows as numpy columns, a span of seconds at a time (finalize, live chart);
- ``batches``: the comparison batches, fed from the same read;
- ``rollup``: per-second label rows merged into coarser spans (``PageRollup``), after the run and while it
  is live (``live_rollup``);
- ``drilldown``: a range of a run's rows for one page (the drill-down and zoom);
- ``shards``: the shards' per-second rows for the analysis (numpy columns; a live chart's early buckets);
- ``read``: every other read — whole-run figures per second for other apps, the watchdog's, the stop
  criteria's, the planned-against-achieved load's, the live page's and ``/metrics``' few rows.

No code outside this package names an interval model or table (``tests/portal/runs/test_store_door.py``).

Models stay in ``portal.runs.models`` (their migrations are the runs app's); the analysis
(``portal.runs.analysis``) computes figures from what this package reads.
"""
