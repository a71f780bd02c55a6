#!/usr/bin/env bash
# Installs (when missing) and starts MariaDB and Redis on this machine, and installs buildah
# (make image, and the image test of `make test`) when missing. Idempotent: running it again
# with everything up does nothing. Needs root (or sudo) only to install or start them.
set -euo pipefail

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
say() { echo "services: $*"; }

need_install=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need_install+=(mariadb-server)
command -v redis-server >/dev/null 2>&1 || need_install+=(redis-server)
command -v buildah >/dev/null 2>&1 || need_install+=(buildah)
if [ ${#need_install[@]} -gt 0 ]; then
  say "installing ${need_install[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need_install[@]}" >/dev/null
fi

mysql_up() { mysqladmin --connect-timeout=2 ping >/dev/null 2>&1 || mysqladmin -h127.0.0.1 -uroot --connect-timeout=2 ping >/dev/null 2>&1; }
if ! mysql_up; then
  say "starting MariaDB"
  as_root mkdir -p /run/mysqld
  as_root chown mysql:mysql /run/mysqld 2>/dev/null || true
  as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  for _ in $(seq 1 60); do mysql_up && break; sleep 0.5; done
  mysql_up || { say "MariaDB did not come up"; exit 1; }
fi

# Root over TCP with an empty password (this project's default DSN) works on the go-svc machines;
# on a stock Debian install root logs in over the unix socket only, so create a local user.
if ! mysql -h127.0.0.1 -uroot --connect-timeout=2 -e 'SELECT 1' >/dev/null 2>&1; then
  as_root mysql -uroot -e "CREATE USER IF NOT EXISTS 'orch'@'127.0.0.1' IDENTIFIED BY 'orch';
    CREATE USER IF NOT EXISTS 'orch'@'localhost' IDENTIFIED BY 'orch';
    GRANT ALL PRIVILEGES ON *.* TO 'orch'@'127.0.0.1'; GRANT ALL PRIVILEGES ON *.* TO 'orch'@'localhost';"
  say "root cannot log in over TCP here: created user orch/orch; use"
  say "  ORCH_MYSQL_DSN='orch:orch@tcp(127.0.0.1:3306)/orchestrator?parseTime=true' ORCH_TEST_MYSQL_DSN='orch:orch@tcp(127.0.0.1:3306)/'"
fi

# The test suites run several orchestrators and workers at once, each with its own pool: lift
# the stock limit of 151 connections. The stock 128 MiB buffer pool and 96 MiB redo log make a
# loaded server flush pages all the time, and every commit then waits behind that I/O: give it
# 1 GiB and 512 MiB (docs/performance.md). Durability is untouched
# (innodb_flush_log_at_trx_commit stays 1). All three are runtime settings of MariaDB 10.11 that
# reset when the server restarts; none is ever lowered.
tune_mariadb="SET GLOBAL max_connections = GREATEST(@@max_connections, 1000);
  SET GLOBAL innodb_buffer_pool_size = GREATEST(@@innodb_buffer_pool_size, 1073741824);
  SET GLOBAL innodb_log_file_size = GREATEST(@@innodb_log_file_size, 536870912);"
as_root mysql -uroot -e "$tune_mariadb" >/dev/null 2>&1 ||
  mysql -h127.0.0.1 -uroot -e "$tune_mariadb" >/dev/null 2>&1 || true

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  say "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
  for _ in $(seq 1 40); do redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && break; sleep 0.25; done
  redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 || { say "Redis did not come up"; exit 1; }
fi
say "MariaDB and Redis are up"
