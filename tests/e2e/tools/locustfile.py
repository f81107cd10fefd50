"""Two requests a user, as the JMeter and k6 tests make them (tests/e2e/test_import_jmeter_locust_end_to_end.py)."""

from locust import HttpUser, constant, task


class Visitor(HttpUser):
    wait_time = constant(0.05)

    @task
    def browse(self):
        self.client.get("/", name="Home")
        self.client.get("/search?q=Area+042", name="Search")
