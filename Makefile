# Two commands matter: `make run` and `make test`. Both work on a fresh machine with only Python 3.11+:
# they create .venv, install requirements-dev.lock (every package pinned with its hashes), and start an embedded
# PostgreSQL 18 when DATABASE_URL is unset.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.lock requirements-dev.lock | cksum | cut -d' ' -f1)
PORT ?= 8000
STATIC_STAMP := staticfiles/.collected

# Every target here is development tooling, so it asks for development when the environment (or make's command
# line) names no mode: unset is production (config/modes.py), and .env never selects the mode. A mode given wins:
# `DJANGO_ENV=production make run` is production, which refuses the demo.
DJANGO_ENV ?= development
export DJANGO_ENV

# How often `make run`'s sweeper returns the units of unpaid orders (seconds; short for the demo).
SWEEP_INTERVAL ?= 2

.PHONY: help setup db migrate demo run test lint format docs stop loadtest bench payment-chaos scaleout failover failover-deps haproxy-deps wrk-deps deploy-rehearsal restore-rehearsal pgbackrest-deps mutate clean browser-deps pgbouncer-deps prometheus-deps loadtest-queue loadtest-wait paced-sale

help:
	@echo "make run    - set up, start the database, migrate, load demo data, serve on 127.0.0.1:$(PORT) + the sweeper"
	@echo "make test   - set up, start the database, lint, run the whole test suite"
	@echo "make stop   - stop the embedded PostgreSQL"
	@echo "make docs   - write the README's error table and docs/configuration.md's tables from the code"
	@echo "make loadtest / make bench - Locust swarm checks / the benchmark's results table (see docs/benchmarks.md)"
	@echo "make loadtest-queue - the waiting room's load profile: 5,000 buyers without and with a queue (docs/queue.md)"
	@echo "make loadtest-wait - 50,000 buyers waiting in the queue, polling with and without the signed pass (docs/queue.md)"
	@echo "make mutate - remove each protection in a scratch copy; fails unless the tests catch every one"
	@echo "make scaleout - HAProxy + 2 web instances + PgBouncer + 2 sweepers under load (see docs/runbooks/scale-out.md)"
	@echo "make failover - Patroni cluster, the leader killed under load, proof that nothing acknowledged was lost"
	@echo "make deploy-rehearsal - a migration, a rolling release and a reload during a flash sale: zero failed requests"
	@echo "make restore-rehearsal - WAL archive + backup (pgBackRest), a mistake during a sale, a restore to 1 s before it"
	@echo "make payment-chaos - 200 orders paid through a misbehaving Midtrans fake: each ends paid once or cancelled"
	@echo "make paced-sale - 300 queued buyers open their Xendit page at once: paced within its 10/s, all paid in time"

# Exactly the reviewed bytes: every package of the lock pinned with its hashes, and pip refuses anything else (an
# unpinned or unhashed requirement, a dependency missing from the lock, a file whose hash differs). The venv's own pip
# is used as Python ships it: upgrading it from the index would install an unhashed package (docs/dependencies.md).
$(STAMP): requirements.lock requirements-dev.lock
	@test -n "$(PYTHON)" || { echo "Python 3.11+ is required (python3.11, python3.12, python3.13 or python3)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --require-hashes -r requirements-dev.lock
	@rm -f $(VENV)/.installed-* && touch $@

setup: $(STAMP)

# Development settings live in .env (git-ignored), written with labelled demo values when missing
# (devtools/devenv.py). With DATABASE_URL set (exported, or a line of your own in .env), that database is used as
# is; otherwise the embedded server is started (reused if running) and its DATABASE_URL written to .env.
db: setup
	@$(PY) -m devtools.devenv --database

# With MIGRATE_DATABASE_URL set (the pooled path: DATABASE_URL points at PgBouncer, DB_PGBOUNCER=true), migrate runs
# on the database itself, as deploy/docker-entrypoint.sh does: migrate refuses the pooler. Every target that migrates
# (run, demo, loadtest, bench, ...) goes through this one.
migrate: db
	@if [ -n "$$MIGRATE_DATABASE_URL" ]; then \
		echo "migrate: on MIGRATE_DATABASE_URL (the database itself, not the pooler)"; \
		DATABASE_URL="$$MIGRATE_DATABASE_URL" DB_PGBOUNCER=false $(PY) manage.py migrate --noinput -v0; \
	else \
		$(PY) manage.py migrate --noinput -v0; \
	fi

demo: migrate
	$(PY) manage.py load_demo_data

# Static files (the admin's, Swagger UI's) are collected and compressed again only when the installed requirements
# or the apps' own static files changed: it takes half a minute on two busy cores.
$(STATIC_STAMP): $(STAMP) $(wildcard */static/*/*) | db
	$(PY) manage.py collectstatic --noinput -v0
	@touch $@

# The web server and the sweeper, both from the Procfile, run by honcho: one Ctrl-C or SIGTERM stops both (honcho
# sends SIGTERM to each one's process group, SIGKILL after 5 s). `-e /dev/null`: honcho's own .env loading would
# override exported variables; config.settings reads .env itself, with the environment winning. PYTHONUNBUFFERED:
# honcho reads both through pipes, so each line shows when it is printed.
run: demo $(STATIC_STAMP)
	@$(PY) -m devtools.devenv --banner --port $(PORT) --sweep-interval $(SWEEP_INTERVAL)
	@SWEEP_INTERVAL=$(SWEEP_INTERVAL) PYTHONUNBUFFERED=1 PATH="$(CURDIR)/$(VENV)/bin:$$PATH" exec $(VENV)/bin/honcho start -e /dev/null -p $(PORT)

lint: db
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DJANGO_DEV_INSECURE_SECRET_KEY=true $(VENV)/bin/mypy  # type checking only: the settings need no real key

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The tables the code declares, written into the docs between their markers (devtools/docgen.py): the README's
# error table from the DomainError classes, docs/configuration.md's tables from config/variables.py. The settings
# need a DATABASE_URL (nothing is queried); the suite fails while a committed doc differs.
docs: db
	$(PY) -m devtools.docgen

# The ops browser test needs Debian's chromium + chromium-driver. As root they are installed here (CI runs as
# root); without root and without them, that one test is deselected with a loud warning instead of failing.
browser-deps:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing chromium + chromium-driver for the browser test"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
		fi; \
	fi

# The PgBouncer tests need Debian's pgbouncer (1.18+), installed here as root like chromium. Without root and
# without it, those tests are deselected with a loud warning; under CI (CI set) they are required.
pgbouncer-deps:
	@if ! command -v pgbouncer >/dev/null 2>&1 && ! test -x /usr/sbin/pgbouncer; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing pgbouncer for the PgBouncer tests"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null; \
		fi; \
	fi

# promtool and prometheus for deploy/prometheus/'s tests (rules checked and unit-tested, a real Prometheus scraping a
# live stack): Debian's prometheus, installed here as root like pgbouncer. Without root and without it, those tests
# are deselected with a loud warning; under CI (CI set) they are required.
prometheus-deps:
	@if ! test -x /usr/bin/promtool || ! test -x /usr/bin/prometheus; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing prometheus (promtool) for the alert rule tests"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
		fi; \
	fi

# The whole suite runs with server-side prepared statements (the default on a direct connection); these suites, whose
# SQL binds lists, arrays, timestamps and NULLs, run a second time with client-side binding, as behind PgBouncer.
UNPREPARED_SUITES := checkout/tests/test_checkout_race.py inventory/tests/test_strategies.py \
	payments/tests/test_faults.py inventory/tests/test_buckets.py carts/tests/test_cart_races.py \
	skincare/tests/test_prepared_statements.py inventory/tests/test_stale_quote.py

test: db lint browser-deps pgbouncer-deps prometheus-deps haproxy-deps wrk-deps
	@deselect=""; \
	if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
		if [ -n "$$CI" ]; then echo "CI: chromium/chromedriver are required for the ops browser test and could not be installed"; exit 1; fi; \
		echo "WARNING: chromium/chromedriver not found, the ops browser test is NOT run (apt-get install chromium chromium-driver)"; \
		deselect="not browser"; \
	fi; \
	if ! command -v pgbouncer >/dev/null 2>&1 && ! test -x /usr/sbin/pgbouncer; then \
		if [ -n "$$CI" ]; then echo "CI: pgbouncer is required for the PgBouncer tests and could not be installed"; exit 1; fi; \
		echo "WARNING: pgbouncer not found, the PgBouncer tests are NOT run (apt-get install pgbouncer)"; \
		deselect="$${deselect:+$$deselect and }not pgbouncer"; \
	fi; \
	if ! test -x /usr/bin/promtool || ! test -x /usr/bin/prometheus; then \
		if [ -n "$$CI" ]; then echo "CI: prometheus (promtool) is required for the alert rule tests and could not be installed"; exit 1; fi; \
		echo "WARNING: prometheus/promtool not found, the alert rule tests are NOT run (apt-get install prometheus)"; \
		deselect="$${deselect:+$$deselect and }not prometheus"; \
	fi; \
	if ! command -v haproxy >/dev/null 2>&1 && ! test -x /usr/sbin/haproxy; then \
		if [ -n "$$CI" ]; then echo "CI: haproxy is required for the load balancer's configuration test and could not be installed"; exit 1; fi; \
		echo "WARNING: haproxy not found, the load balancer's configuration test is NOT run (apt-get install haproxy)"; \
		deselect="$${deselect:+$$deselect and }not haproxy"; \
	fi; \
	if ! command -v wrk >/dev/null 2>&1; then \
		if [ -n "$$CI" ]; then echo "CI: wrk is required for the benchmark's HTTP cell test and could not be installed"; exit 1; fi; \
		echo "WARNING: wrk not found, the benchmark's HTTP cell test is NOT run (apt-get install wrk)"; \
		deselect="$${deselect:+$$deselect and }not wrk"; \
	fi; \
	if [ -n "$$deselect" ]; then $(PY) -m pytest -m "$$deselect" $(PYTEST_ARGS); else $(PY) -m pytest $(PYTEST_ARGS); fi && \
	echo "the race, strategy and fault suites again without server-side prepared statements (DB_PREPARED_STATEMENTS=false)" && \
	DB_PREPARED_STATEMENTS=false $(PY) -m pytest $(UNPREPARED_SUITES) $(PYTEST_ARGS)

stop: setup
	$(PY) -m devtools.devdb stop

# Every profile behind HAProxy (the front that answers an overload with 503 + Retry-After).
loadtest: demo haproxy-deps
	$(PY) -m bench loadtest

# The waiting room's profile alone (`make loadtest` runs it too, last; about four minutes on a quiet machine).
loadtest-queue: demo haproxy-deps
	$(PY) -m bench loadtest --only queue

# 50,000 buyers in the waiting line, driven by the light client bench/crowd.py, polling with the signed pass and then
# without it (docs/queue.md#the-waiting-line-at-scale; about seven minutes).
loadtest-wait: demo
	$(PY) -m bench crowd

# Every cell of the benchmark on a fresh database and the crowd's first minute, the results written into
# docs/benchmarks.md (about 15 minutes on two cores).
bench: demo wrk-deps
	$(PY) -m bench table

# A flash sale of 200 units paid through the Midtrans fake while it injects latency, time-outs, 5xx, a stall and
# duplicate, out-of-order, late, lost and foreign notifications, with one restart of the web tier; the proof that every
# order ends paid exactly once or cancelled (devtools/payment_chaos.py; make test runs it with 30). About a minute.
payment-chaos: demo
	$(PY) -m devtools.payment_chaos

# A queued flash sale of 300 units whose buyers open their Xendit payment page at once, on 2 gunicorn processes paced
# at PAYMENT_SESSIONS_PER_SECOND=8 against the Xendit fake at its published 10/s; measures the pages per second at the
# fake, the wait for a page, the 503s and 429s, and proves every page opened before its deadline, every order paid,
# audit and reconciliation clean (devtools/paced_sale.py, on a database of its own; make test runs it with 40).
paced-sale: db
	$(PY) -m devtools.paced_sale

# Mutation testing (docs/reliability.md): each protection removed in a scratch copy must turn its tests red.
mutate: db
	$(PY) -m devtools.mutate $(MUTATIONS)

# wrk, the HTTP load generator of `make bench` (and of its cells' test), installed here as root like pgbouncer.
wrk-deps:
	@if ! command -v wrk >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing wrk"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; \
		fi; \
	fi

# HAProxy for `make loadtest`, `make scaleout` and `make deploy-rehearsal` (Debian's haproxy 2.6), installed here as
# root like pgbouncer. Fails loudly when it cannot be had.
haproxy-deps:
	@if ! command -v haproxy >/dev/null 2>&1 && ! test -x /usr/sbin/haproxy; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing haproxy"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy >/dev/null; \
		fi; \
	fi

# HAProxy → 2 gunicorn instances → PgBouncer (transaction mode) → PostgreSQL, + 2 sweepers; flash sale + mixed load.
scaleout: db pgbouncer-deps haproxy-deps
	@command -v haproxy >/dev/null 2>&1 || test -x /usr/sbin/haproxy || { \
		echo "make scaleout needs haproxy (as root: apt-get install haproxy)"; exit 1; }
	$(PY) -m devtools.scaleout

# HAProxy → 2 gunicorns → PgBouncer → PostgreSQL under a flash-sale load: a migration (a nullable column and a
# concurrent index on orders, scratch files written and removed), a rolling release (drain, stop, start, ready, back
# in) and a gunicorn reload (SIGHUP); zero failed requests. About a minute; not part of `make test`.
deploy-rehearsal: db pgbouncer-deps haproxy-deps
	$(PY) -m devtools.deploy_rehearsal

# pgBackRest + PostgreSQL 15 for `make restore-rehearsal` (Debian's pgbackrest 2.45 supports PostgreSQL up to 15, not
# the embedded 18), installed here as root like pgbouncer; PostgreSQL runs as the OS user `postgres` (created if missing).
pgbackrest-deps:
	@if ! command -v pgbackrest >/dev/null 2>&1 || ! test -x /usr/lib/postgresql/15/bin/postgres; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing pgbackrest + postgresql-15 for make restore-rehearsal"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbackrest postgresql-15 >/dev/null; \
		fi; \
	fi
	@command -v pgbackrest >/dev/null 2>&1 && test -x /usr/lib/postgresql/15/bin/postgres || { \
		echo "make restore-rehearsal needs pgbackrest and postgresql-15 (as root: apt-get install pgbackrest postgresql-15)"; exit 1; }
	@if [ "$$(id -u)" = "0" ] && ! id postgres >/dev/null 2>&1; then useradd --system --no-create-home --shell /usr/sbin/nologin postgres; fi

# PostgreSQL 15 with WAL archived by pgBackRest, a full backup, a sale, an operator's mistake at T (TRUNCATE orders
# CASCADE), a copy restored to T - 1 s and proven (devtools/restore_rehearsal.py); then the same on the Patroni
# cluster with the leader's host lost before the mistake (devtools/restore_patroni.py). About 4 minutes; not in
# `make test`.
restore-rehearsal: setup pgbackrest-deps failover-deps
	$(PY) -m devtools.restore_rehearsal
	$(PY) -m devtools.restore_patroni

# Patroni + etcd for `make failover` (Debian's patroni 3.0 and etcd-server 3.4), installed here as root like pgbouncer;
# etcd and Patroni run as the OS user `postgres` (created if missing). Fails loudly when they cannot be had.
failover-deps:
	@if ! command -v patroni >/dev/null 2>&1 || ! command -v etcd >/dev/null 2>&1; then \
		if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing patroni + etcd-server for make failover"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patroni etcd-server >/dev/null; \
		fi; \
	fi
	@command -v patroni >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1 || { \
		echo "make failover needs patroni and etcd (as root: apt-get install patroni etcd-server)"; exit 1; }
	@if [ "$$(id -u)" = "0" ] && ! id postgres >/dev/null 2>&1; then useradd --system --no-create-home --shell /usr/sbin/nologin postgres; fi

# etcd + 2 Patroni nodes (synchronous) + 2 gunicorns + 2 sweepers; the leader's host is killed under load; then the
# control (asynchronous replication, promoted by hand). About 2.5 minutes; not part of `make test`.
failover: setup failover-deps
	$(PY) -m devtools.failover
	$(PY) -m devtools.failover --control

clean: stop
	rm -rf .data staticfiles
