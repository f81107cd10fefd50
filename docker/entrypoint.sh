#!/bin/sh
# One image, three roles: web (migrates first), worker, beat.
set -e
case "$1" in
  web)
    python manage.py migrate --noinput
    exec gunicorn portal.wsgi --config gunicorn.conf.py --bind 0.0.0.0:8000 --workers "${WEB_WORKERS:-3}" --threads 4 --access-logfile -
    ;;
  worker)
    exec celery -A workers.celery worker -Q default,engine --concurrency "${WORKER_CONCURRENCY:-4}" --loglevel INFO
    ;;
  beat)
    exec celery -A workers.celery beat --schedule /app/var/celerybeat-schedule --loglevel INFO
    ;;
  *)
    exec "$@"
    ;;
esac
