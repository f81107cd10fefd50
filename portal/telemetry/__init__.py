"""Server figures as Prometheus speaks them, without Django's models: the text exposition format, the
counter sets (which series make a CPU %, a request rate …), the scrape of one endpoint and PromQL against
a team's own Prometheus. Environments validate their servers with it (portal.projects) and the server
metrics app collects with it (portal.metrics); both sit above it, so it imports neither."""
