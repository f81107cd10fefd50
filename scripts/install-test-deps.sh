#!/usr/bin/env bash
# What the test suite needs from Debian, installed when missing: `make test` and `.ci/run` both
# call this script, so a fresh machine's `make test` does all of its own set-up.
#   chromium               the browser tests (Playwright drives /usr/bin/chromium; it never downloads one)
#   jmeter, jmeter-http    the real-JMeter import test (tests/e2e/test_import_jmeter_locust_end_to_end.py)
#   default-jdk-headless   javac for that test's launcher (tests/e2e/tools/PermissiveJMeter.java)
#   nginx-light            the HTTP/1.1 client against nginx (tests/engine/test_h1.py)
#   prometheus             server metrics read from a real Prometheus (tests/e2e/test_prometheus_source.py)
#   iproute2               network namespaces as other machines (`ip netns`: tests/e2e/test_remote_workers.py)
# Everything else comes from PyPI (requirements.txt; Locust into bench/.venv-locust on first use).
# As root it runs apt-get; otherwise, or with --check, it prints the exact command and exits 1.
set -euo pipefail

root="${PLIMSOLL_TEST_DEPS_ROOT:-}"  # tests point this at a folder of their own
find_missing() {
  missing=()
  [ -x "$root/usr/bin/chromium" ] || missing+=(chromium)
  [ -f "$root/usr/share/jmeter/bin/ApacheJMeter.jar" ] || missing+=(jmeter)
  [ -f "$root/usr/share/jmeter/lib/ext/ApacheJMeter_http.jar" ] || missing+=(jmeter-http)
  [ -x "$root/usr/bin/javac" ] || missing+=(default-jdk-headless)
  [ -x "$root/usr/sbin/nginx" ] || missing+=(nginx-light)
  [ -x "$root/usr/bin/prometheus" ] || missing+=(prometheus)
  [ -x "$root/sbin/ip" ] || missing+=(iproute2)
}

find_missing
[ ${#missing[@]} -eq 0 ] && exit 0

command="apt-get update && apt-get install -y ${missing[*]}"
if [ "${1:-}" != "--check" ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "install-test-deps: installing ${missing[*]}" >&2
  # No daemon started by a package's install (nginx): the tests start their own.
  export DEBIAN_FRONTEND=noninteractive RUNLEVEL=1
  apt-get update -q && apt-get install -y -q "${missing[@]}"
  # What the packages installed is checked again: a distribution that names or places them otherwise
  # (Ubuntu's chromium-browser snap, say) stops here, not in the middle of the tests.
  find_missing
  [ ${#missing[@]} -eq 0 ] && exit 0
  echo "install-test-deps: installed, but still missing what the tests run: ${missing[*]}" >&2
  echo "The tests expect Debian's packages and paths (docs/development/tests.md)." >&2
  exit 1
fi
echo "The tests need Debian packages that are missing: ${missing[*]}" >&2
echo "Install them (as root), then run make test again:" >&2
echo "  sudo sh -c '$command'" >&2
exit 1
