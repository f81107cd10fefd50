"""Each user makes ITERATIONS iterations of two requests, then stops (test_import_jmeter_locust_end_to_end.py).

Users that stop by themselves, before ``--run-time`` ends, let Locust's CSV writer (once a second)
write its totals after the last request; with users cut off by ``--run-time`` its files miss
the requests of the last second, which Locust's console summary still counts.
"""

import os

from locust import HttpUser, constant, task
from locust.exception import StopUser

ITERATIONS = int(os.environ.get("PLIMSOLL_ITERATIONS", "40"))


class Visitor(HttpUser):
    wait_time = constant(0.02)

    def on_start(self):
        self.done = 0

    @task
    def browse(self):
        if self.done >= ITERATIONS:
            raise StopUser
        self.done += 1
        self.client.get("/", name="Home")
        self.client.get("/search?q=Area+042", name="Search")
