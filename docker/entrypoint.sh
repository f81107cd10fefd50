#!/bin/sh
# One image, four roles: web (migrates first), worker (load), bookkeeping, beat.
set -e
case "$1" in
  web)
    python manage.py migrate --noinput
    exec gunicorn portal.wsgi --config gunicorn.conf.py --bind 0.0.0.0:8000 --workers "${WEB_WORKERS:-3}" --threads 4 --access-logfile -
    ;;
  worker)
    # Load generation only: engine (the default pool) or engine.<pool> when PLIMSOLL_WORKER_LABELS names a pool.
    pool=$(printf '%s' "${PLIMSOLL_WORKER_LABELS:-}" | tr ',' '\n' | sed -n 's/^ *pool *= *//p' | head -n 1)
    exec celery -A workers.celery worker -Q "engine${pool:+.$pool}" -n "engine-$(hostname)@%h" --concurrency "${WORKER_CONCURRENCY:-4}" --loglevel INFO
    ;;
  bookkeeping)
    # The bookkeeping queue (admission, watchdog, schedules, verdicts, notifications, imports): never shards.
    exec celery -A workers.celery worker -Q default -n "bookkeeping-$(hostname)@%h" --concurrency "${BOOKKEEPING_CONCURRENCY:-2}" --loglevel INFO
    ;;
  beat)
    exec celery -A workers.celery beat --schedule /app/var/celerybeat-schedule --loglevel INFO
    ;;
  *)
    exec "$@"
    ;;
esac
